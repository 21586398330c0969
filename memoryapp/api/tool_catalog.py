"""The list of the memory tools (001 `/memory tools`): one source, the MCP server's own tool list.

The MCP server (memoryapp.mcp, the outer layer, which the API may not import) registers how to read
its tools when it loads (`memory_tools_source`); `GET /api/v1/memory-tools` answers what that gives,
so the REST list and MCP `tools/list` are the same definitions, never a copy kept in step by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Each tool as {"name", "title", "description", "input_schema", "annotations"}.
ToolLister = Callable[[], list[dict[str, Any]]]
_source: list[ToolLister] = []


def memory_tools_source(lister: ToolLister) -> None:
    """Set what lists the memory tools (the MCP server's tools/list); the last one set wins."""
    _source[:] = [lister]


def memory_tools_listed() -> list[dict[str, Any]]:
    """The memory tools, in the MCP server's order. The URL configuration loads the server (its
    endpoint is routed there), so it has registered before any request is served."""
    if not _source:
        from django.urls import get_resolver

        get_resolver().url_patterns  # noqa: B018  (loading the root URLconf loads the MCP server)
    if not _source:
        raise RuntimeError("The MCP server did not register its tools (memory_tools_source).")
    return _source[0]()
