"""What the search and context tests share: the embedding job, an entry found by its words, a failing embedder."""

from __future__ import annotations

from typing import Any

from memoryapp.models import Agent, Entry, Thread
from memoryapp.search.embedders import EmbedderError
from memoryapp.search.indexing import embed_pending


def embedded(agent: Agent) -> dict[str, Any]:
    """Run the embedding job's service for the agent (the tests' transactions never commit, so
    the job the writes scheduled on commit never ran)."""
    return embed_pending(agent_id=agent.pk)


def by_text(thread: Thread, needle: str) -> Entry:
    return Entry.objects.get(thread=thread, text__contains=needle)


class FailingEmbedder:
    """An embedder whose every call fails as a provider's can (`monkeypatch` it in as `embedders.embedder`)."""

    name = "failing"
    dimensions = 384

    def __init__(self, message: str = "connection refused") -> None:
        self.message = message

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbedderError(self.message)
