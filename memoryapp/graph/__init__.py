"""The knowledge graph: edges between entities, their traversal, the graph context and channels."""
