"""The MCP server (Model Context Protocol, streamable HTTP at /mcp/): the agent API's memory tools for
MCP clients, on the same services as the REST API. `server` holds the tools and resources, `http`
the Django view that authenticates the key and hands the request to the SDK."""
