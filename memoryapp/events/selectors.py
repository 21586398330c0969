"""Reads of an agent's event stream: every query is filtered by the agent first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memoryapp.models import Event, EventCounter

# Events read at once (a page, a stream's batch, a webhook's delivery).
MAX_BATCH = 1000


def events_after(*, agent_id: int, after: int, limit: int = 100, types: Sequence[str] | None = None) -> list[Event]:
    """The agent's committed events numbered after `after`, oldest first (rows of transactions not
    committed yet have no number and are never returned)."""
    rows = Event.objects.filter(agent_id=agent_id, seq__gt=after)
    if types:
        rows = rows.filter(type__in=list(types))
    return list(rows.order_by("seq")[: max(1, min(limit, MAX_BATCH))])


def events_last_seq(*, agent_id: int) -> int:
    """The number of the agent's newest committed event (0: none yet): where a live stream starts."""
    return EventCounter.objects.filter(agent_id=agent_id).values_list("last_seq", flat=True).first() or 0


def events_first_seq(*, agent_id: int) -> int | None:
    """The number of the agent's oldest event still kept (None: none kept): retention took those before it."""
    return (
        Event.objects.filter(agent_id=agent_id, seq__isnull=False).order_by("seq").values_list("seq", flat=True).first()
    )


@dataclass(frozen=True)
class Missed:
    """Events a reader resuming after `after` can no longer have: retention deleted them."""

    from_seq: int
    to_seq: int

    def as_json(self) -> dict[str, int]:
        return {"from_seq": self.from_seq, "to_seq": self.to_seq}


def events_missed(*, agent_id: int, after: int) -> Missed | None:
    """What retention took of the stream after `after` (None: nothing, the reader misses nothing)."""
    last = events_last_seq(agent_id=agent_id)
    if last <= after:
        return None
    first = events_first_seq(agent_id=agent_id)
    kept_from = first if first is not None else last + 1
    if kept_from <= after + 1:
        return None
    return Missed(from_seq=after + 1, to_seq=kept_from - 1)


def event_json(event: Event) -> dict[str, Any]:
    """An event as the API, the stream and webhooks send it: ids only."""
    body: dict[str, Any] = {"seq": event.seq, "type": event.type, "ids": list(event.ids or [])}
    if event.thread_id:
        body["thread_id"] = event.thread_id
    body["at"] = event.at.isoformat() if event.at else None
    return body
