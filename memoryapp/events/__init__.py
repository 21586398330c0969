"""Change events: what changed in an agent's memory (ids only), in commit order, for SSE and webhooks."""
