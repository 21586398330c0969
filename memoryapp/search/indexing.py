"""Background embedding of entries and items (owned by the recall area)."""

from __future__ import annotations


def embedding_schedule(*, agent_id: int) -> None:
    """Send the embedding job for the agent's entries and items not embedded yet (debounced).

    Contract: called after commit by memoryapp.services.hooks; must be cheap and idempotent.
    """
    return None  # placeholder until the recall area lands its job
