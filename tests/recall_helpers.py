"""Shared by the recall area's tests: threads of entries written through the services."""

from __future__ import annotations

from typing import Any

from memoryapp.models import Agent, Entry, Thread
from memoryapp.search.indexing import embed_pending
from memoryapp.services.threads import entry_add, thread_create


def conversation(agent: Agent, turns: list[Any], *, external_id: str = "t-1", user_id: str = "u-ana") -> Thread:
    """A thread of turns: (role, text) pairs, or dicts of entry_add's arguments."""
    thread = thread_create(agent=agent, external_id=external_id, user_id=user_id)
    for turn in turns:
        if isinstance(turn, dict):
            entry_add(thread=thread, **turn)
        else:
            role, text = turn
            entry_add(thread=thread, role=role, content=text)
    thread.refresh_from_db()
    return thread


def embedded(agent: Agent) -> dict[str, Any]:
    """Run the embedding job's service for the agent (the tests' transactions never commit)."""
    return embed_pending(agent_id=agent.pk)


def by_text(thread: Thread, needle: str) -> Entry:
    return Entry.objects.get(thread=thread, text__contains=needle)
