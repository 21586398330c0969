"""Writes of change events: `event_record` (called by every service that changes memory) and the prune.

An event says what changed (its type) and which rows (their ids), never what they say: a reader
that wants the words reads them through the API, under its key, where isolation, redaction and
erasure apply.

Commit order, and why a counter row locked at commit
---------------------------------------------------

A reader resumes from the last number it saw (`Last-Event-ID`), so a number must never become
visible after a larger one of the same agent. A sequence (bigserial) taken at INSERT does not give
that: transaction A takes 5, B takes 6, B commits, a reader sees 6 and moves on, then A commits 5
and the reader never sees it. Three ways out were weighed:

1. Readers stop below the oldest transaction still running (`pg_snapshot_xmin`): no cost for
   writers, but one long transaction anywhere in the database (an erasure, a long import) holds
   every agent's stream back, and the position becomes a pair (xid, id).
2. A per-agent counter row locked when the event is written: exact, but the lock is held for the
   rest of the writing transaction, so every write of an agent that records an event queues
   behind the one before for its whole duration.
3. The same counter, locked only at COMMIT: chosen. `event_record` inserts the event with no
   number; a deferred constraint trigger (migration 0013, `memoryapp_event_number`) fires as the
   transaction commits, locks the agent's `EventCounter` row and numbers the transaction's events
   after its last number. PostgreSQL releases row locks after the commit is visible, so the next
   transaction of the agent reads the counter only once this one is committed: numbers follow
   commit order, without gaps, and a reader that sees n+1 sees n.

The cost: an agent's transactions that record events commit one after another for the duration
of the commit itself (the trigger's few statements and the WAL flush), not for their whole
length; transactions of different agents never wait for each other. `bench/events.py` measures
it. A transaction that writes events of several agents locks their counters in agent-id order, so
two such transactions cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from psycopg.types.json import Jsonb

from memoryapp.events.webhooks import webhooks_wake_after_commit
from memoryapp.models import Event, WebhookDelivery

# Every type of event, and what its `ids` are.
EVENT_TYPES: dict[str, str] = {
    "entry.added": "entries added to the thread (a write, a batch, a fork's copies, an import)",
    "entry.deleted": "entries deleted (spliced out) from the thread",
    "entry.redacted": "entries whose words were replaced with [redacted]",
    "thread.deleted": "the thread and all its entries were deleted (no ids)",
    "item.written": "a memory item was written (a new state of its slot)",
    "item.activated": "memory items became active (approved, a repeat that qualifies, a stale mark undone)",
    "item.stale": "memory items marked stale",
    "item.rejected": "suggested memory items a reviewer rejected",
    "item.forgotten": "memory items let go (forgotten), or purged with the entries they stood on",
    "file.version": "memory-file versions written (edits, deletions, renames, context documents)",
    "file.redacted": "memory-file versions whose content was redacted (also those written at an entry deleted or redacted)",
    "compaction.created": "a compaction entry was written (its id)",
    "erasure.done": "an erasure request finished (its id)",
}


# Ids one event names at most: a fork or an import of 100,000 entries is 100 events, not one of megabytes.
MAX_EVENT_IDS = 1000


def event_record(*, agent_id: int, type: str, ids: Sequence[str] = (), thread_id: str = "") -> None:
    """Record that memory changed, in the caller's transaction (numbered when it commits).

    Call it from the service that made the change, after the change, inside its transaction: a
    rollback takes the event with it. `ids` are the rows touched (never their content); more than
    MAX_EVENT_IDS make consecutive events of the same type.
    """
    event_record_many(agent_id=agent_id, type=type, by_thread=[(thread_id, ids)])


def event_record_many(*, agent_id: int, type: str, by_thread: Sequence[tuple[str, Sequence[str]]]) -> None:
    """`event_record` for several threads at once, one INSERT: the events of each (thread external
    id, ids) in this order, as that many calls would record them (the prune deletes threads by the
    hundred)."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    rows: list[Event] = []
    for thread_id, ids in by_thread:
        named = [str(i) for i in ids]
        chunks = [named[at : at + MAX_EVENT_IDS] for at in range(0, len(named), MAX_EVENT_IDS)] or [[]]
        rows += [Event(agent_id=agent_id, type=type, thread_id=thread_id or "", ids=chunk) for chunk in chunks]
    if not rows:
        return
    if len(rows) == 1:
        # The commonest write (an append's one event): its SQL built once, not compiled per call by
        # save() (~7% of a single append's web CPU, issue 26); seq, at and txid are the database's.
        row = rows[0]
        with connection.cursor() as cursor:
            params: list[Any] = [row.agent_id, row.type, row.thread_id, Jsonb(row.ids)]
            cursor.execute(_INSERT_ONE_SQL, params)
    else:
        Event.objects.bulk_create(rows)
    webhooks_wake_after_commit(agent_id=agent_id)


_INSERT_HEAD = (
    f"INSERT INTO {Event._meta.db_table} "
    f"({', '.join(str(Event._meta.get_field(name).column) for name in ('agent', 'type', 'thread_id', 'ids'))})"  # type: ignore[union-attr]
)
_INSERT_ONE_SQL = f"{_INSERT_HEAD} VALUES (%s, %s, %s, %s)"


def event_insert_one(
    *, agent_id: int, type: str, ids: Sequence[str] = (), thread_id: str = "", source: str = ""
) -> tuple[str, list[Any]] | None:
    """What `event_record` would send, as one INSERT statement and its parameters, for a service that
    sends it in the same statement as its own change (an append: its entry, its thread's counters and
    its event in one round trip, issue 26); None when the ids make more than one event (then call
    `event_record`). The caller runs it in its transaction, after the change, and then calls
    `event_inserted(agent_id=...)`, as `event_record` does both. With `source` (a relation of the
    caller's statement, a WITH query's name), the event is inserted once for each of its rows:
    none when the change it follows wrote nothing."""
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {type!r}")
    if len(ids) > MAX_EVENT_IDS:
        return None
    sql = f"{_INSERT_HEAD} SELECT %s, %s, %s, %s FROM {source}" if source else _INSERT_ONE_SQL
    return sql, [agent_id, type, thread_id or "", Jsonb([str(i) for i in ids])]


def event_inserted(*, agent_id: int) -> None:
    """After the statement of `event_insert_one` ran: the agent's webhooks are woken once it commits."""
    webhooks_wake_after_commit(agent_id=agent_id)


def events_forget_threads(*, agent_id: int, thread_ids: Sequence[str]) -> int:
    """The agent's events stop naming these threads (their client-chosen ids, which may name a
    person: `trip:p-ines`): for a person's erasure, in its transaction. The events stay, numbered
    as they were, with no thread; returns how many were changed. A reader or webhook behind them
    gets them so."""
    if not thread_ids:
        return 0
    return Event.objects.filter(agent_id=agent_id, thread_id__in=list(thread_ids)).update(thread_id="")


@transaction.atomic
def events_prune(*, older_than: datetime, agent_id: int | None = None, limit: int | None = None) -> dict[str, int]:
    """Delete the events committed before `older_than`, and the webhook delivery attempts made before
    it (for the retention schedule). Numbers are given in commit order, so what goes is a prefix of
    each agent's stream: a reader resuming from before it is told what it missed (`gap`).

    With `agent_id`, only that agent's events and its webhooks' deliveries; with `limit`, at most
    that many rows of each (the prune's batches: call again until both counts are 0)."""
    events_q = Event.objects.filter(at__lt=older_than)
    deliveries_q = WebhookDelivery.objects.filter(at__lt=older_than)
    if agent_id is not None:
        events_q = events_q.filter(agent_id=agent_id)
        deliveries_q = deliveries_q.filter(webhook__agent_id=agent_id)
    if limit is not None:
        events_q = Event.objects.filter(pk__in=list(events_q.order_by("pk").values_list("pk", flat=True)[:limit]))
        deliveries_q = WebhookDelivery.objects.filter(
            pk__in=list(deliveries_q.order_by("pk").values_list("pk", flat=True)[:limit])
        )
    events, _ = events_q.delete()
    deliveries, _ = deliveries_q.delete()
    return {"events": events, "webhook_deliveries": deliveries}
