"""Reads of the run event ledger: a run's events after a position, oldest first (the run is reached
through `run_for_agent`, filtered by the agent first)."""

from __future__ import annotations

from typing import Any

from memoryapp.models import RunEvent, ThreadRun

BATCH = 500


def ledger_events_after(*, run: ThreadRun, after: int, limit: int = BATCH) -> list[RunEvent]:
    return list(RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:limit])


def ledger_state(*, run_pk: str) -> tuple[int, str]:
    """(the last event's number, how the ledger ended: "" while open), read afresh."""
    row = ThreadRun.objects.filter(pk=run_pk).values_list("ledger_seq", "ledger_outcome").first()
    return (0, "ended") if row is None else (int(row[0]), str(row[1]))


def run_event_json(event: RunEvent) -> dict[str, Any]:
    """An event as the stream sends it: its number, kind and time, then its own fields (000 RunEvent)."""
    return {"seq": event.seq, "kind": event.kind, "at": event.at.isoformat(), **(event.body or {})}
