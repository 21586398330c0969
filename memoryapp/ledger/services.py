"""Writes of the run event ledger: `ledger_publish` (a batch of a run's events, in one transaction).

Where the events live, and why there
------------------------------------

Rows in PostgreSQL (`RunEvent`), numbered 1, 2, 3 ... within the run under the run's row lock, and a
wake-up on Redis pub/sub after the commit. Weighed against a Redis stream per run:

- The order, the refusal after `settled` / `faulted` (409) and the snapshot are one transaction with
  the run's row: a second publisher of the same run waits for the first's commit, so numbers never
  become visible out of order (a reader that saw n+1 saw n), and nothing is taken after the end.
- The events go with their run and thread (a delete, a person's erasure: the database cascades), and
  their bodies (what the model said) are sealed at rest under the person's key, as entries are. A
  Redis stream would be a second store for erasure, retention and encryption to reach, and Redis is
  run here as a broker, without the durability a kept `settled` needs.
- Subscribers are woken by a Redis PUBLISH on the run's channel, not by NOTIFY: a NOTIFY serializes
  the commits of the whole database on the notification queue's lock (what the change-event stream
  avoids, memoryapp/events/stream.py), and LISTEN needs a session of its own that a
  transaction-pooling PgBouncer does not give. A wake-up carries nothing but the number: a lost one
  (Redis away) costs a subscriber one poll interval, never an event.

Isolation: the publisher writes rows and publishes a few bytes; it never waits for a subscriber. Each
subscriber reads the rows on its own connection at its own pace (memoryapp.ledger.stream), so a slow
one or one that went away holds up nobody; Redis drops a pub/sub client whose buffer overflows
rather than block the publisher.

A batch, in one transaction:

1. Each event is checked (kind, fields, sizes): a 400 naming `events[i].<field>`, nothing written.
2. The run's row is locked; a ledger already ended (`settled` / `faulted`) is a 409 `run_settled`, as
   is an event after a `settled` / `faulted` within the batch.
3. The events are numbered after `ledger_seq` and inserted; the last that carries a snapshot
   (`snapshot`, `settled`, `faulted`, 000's SnapshotAccumulator rule; deltas and tool events are
   ignored) replaces the run's snapshot; a `settled` / `faulted` ends the ledger. The events and
   the snapshot that name a registered person are recorded in the subject index.
4. The bounded window: deltas, tool events and snapshot events further than RUN_EVENTS_WINDOW behind
   the newest are deleted (a range of the unique index); `settled` and `faulted` are kept with the run.
5. After the commit, the wake-up is published.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from governance.audit.chain import audit_append
from memoryapp.agents.limits import limits_redis
from memoryapp.errors import Conflict, DomainError, NotFound
from memoryapp.models import Agent, RunEvent, SubjectMention, Thread, ThreadRun
from memoryapp.subjects.detect import mentions_record

logger = logging.getLogger(__name__)

DELTAS = ("text_delta", "thinking_delta")
TOOLS = ("tool_started", "tool_finished")
TERMINAL = ("settled", "faulted")
CARRY_SNAPSHOT = ("snapshot", *TERMINAL)
KINDS = (*DELTAS, *TOOLS, "snapshot", *TERMINAL)
# 000's RunPhase: a snapshot's `phase`, when it says one.
PHASES = ("idle", "invoking", "streaming", "dispatching", "compacting", "settled", "faulted")
# The fields of each kind besides `kind` (000's RunEvent union), and which are required.
FIELDS: dict[str, dict[str, bool]] = {
    "text_delta": {"delta": True},
    "thinking_delta": {"delta": True},
    "tool_started": {"id": True, "name": True},
    "tool_finished": {"id": True, "name": True, "outcome": False},
    "snapshot": {"snapshot": True},
    "settled": {"snapshot": True},
    "faulted": {"error": True, "snapshot": True},
}
MAX_BATCH = 500
MAX_DELTA_CHARS = 64 * 1024
MAX_NAME_CHARS = 200
# A snapshot holds the run's messages: large, but bounded (its JSON, in bytes).
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024
MAX_OUTCOME_BYTES = 256 * 1024


def wake_channel(run_id: str) -> str:
    """The Redis pub/sub channel a run's subscribers wait on."""
    return f"memory:run-events:{run_id}"


@dataclass(frozen=True)
class Published:
    run: ThreadRun
    events: list[RunEvent]


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _text(value: Any, *, field: str, limit: int, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if not value and not allow_empty:
        raise DomainError("required", f"{field} must not be empty.", field=field)
    if len(value) > limit:
        raise DomainError("too_long", f"{field} is longer than {limit} characters.", field=field)
    return value


def _snapshot(value: Any, *, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DomainError("invalid_type", f"{field} must be an object (000 RunSnapshot).", field=field)
    phase = value.get("phase")
    if phase is not None and phase not in PHASES:
        raise DomainError("invalid_value", f"{field}.phase must be one of {', '.join(PHASES)}.", field=f"{field}.phase")
    if _json_size(value) > MAX_SNAPSHOT_BYTES:
        raise DomainError("too_large", f"{field} is larger than {MAX_SNAPSHOT_BYTES} bytes of JSON.", field=field)
    return value


def event_check(raw: Any, *, field: str) -> tuple[str, dict[str, Any]]:
    """(kind, body) of one event as a client sends it (`{"kind", ...its fields}`), else a 400 naming
    the field under `field` (`events[3].delta`)."""
    if not isinstance(raw, dict):
        raise DomainError("invalid_type", f"{field} must be an object with a kind.", field=field)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise DomainError("invalid_value", f"{field}.kind must be one of {', '.join(KINDS)}.", field=f"{field}.kind")
    wanted = FIELDS[kind]
    unknown = sorted(set(raw) - {"kind", *wanted})
    if unknown:
        raise DomainError(
            "unknown_field", f"{field}.{unknown[0]}: a {kind} event has no such field.", field=f"{field}.{unknown[0]}"
        )
    for name, required in wanted.items():
        if required and name not in raw:
            raise DomainError("required", f"{field}.{name} is required for a {kind} event.", field=f"{field}.{name}")
    body: dict[str, Any] = {}
    if kind in DELTAS:
        body["delta"] = _text(raw["delta"], field=f"{field}.delta", limit=MAX_DELTA_CHARS, allow_empty=True)
    if kind in TOOLS:
        body["id"] = _text(raw["id"], field=f"{field}.id", limit=MAX_NAME_CHARS)
        body["name"] = _text(raw["name"], field=f"{field}.name", limit=MAX_NAME_CHARS)
    if kind == "tool_finished" and "outcome" in raw:
        if _json_size(raw["outcome"]) > MAX_OUTCOME_BYTES:
            raise DomainError(
                "too_large",
                f"{field}.outcome is larger than {MAX_OUTCOME_BYTES} bytes of JSON.",
                field=f"{field}.outcome",
            )
        body["outcome"] = raw["outcome"]
    if kind == "faulted":
        error = raw["error"]
        if not isinstance(error, dict | str) or not error:
            raise DomainError(
                "invalid_type", f"{field}.error must be an object or a text (000 RunError).", field=f"{field}.error"
            )
        if _json_size(error) > MAX_OUTCOME_BYTES:
            raise DomainError(
                "too_large", f"{field}.error is larger than {MAX_OUTCOME_BYTES} bytes of JSON.", field=f"{field}.error"
            )
        body["error"] = error
    if kind in CARRY_SNAPSHOT:
        body["snapshot"] = _snapshot(raw["snapshot"], field=f"{field}.snapshot")
    return kind, body


def events_check(raw: Any) -> list[tuple[str, dict[str, Any]]]:
    """A request's events: `{"events": [...]}` (a batch) or one event object; each checked."""
    if isinstance(raw, dict) and "events" in raw:
        extra = sorted(set(raw) - {"events"})
        if extra:
            raise DomainError("unknown_field", f"{extra[0]}: a batch holds only `events`.", field=extra[0])
        events = raw["events"]
        if not isinstance(events, list) or not events:
            raise DomainError("invalid_type", "events must be a non-empty list.", field="events")
        if len(events) > MAX_BATCH:
            raise DomainError(
                "batch_too_large",
                f"A batch holds at most {MAX_BATCH} events (this one {len(events)}).",
                field="events",
                status=413,
            )
        return [event_check(event, field=f"events[{index}]") for index, event in enumerate(events)]
    return [event_check(raw, field="event")]


def _ended(run: ThreadRun) -> Conflict:
    return Conflict(
        "run_settled", f"Run {run.id} {run.ledger_outcome} (event {run.ledger_seq}): its ledger takes no more events."
    )


def _wake(run_id: str, seq: int) -> None:
    try:
        limits_redis().publish(wake_channel(run_id), str(seq))
    except redis.RedisError as error:  # the events are committed: subscribers find them at their next poll
        logger.warning("run events: no wake-up published (%s)", type(error).__name__)


@transaction.atomic
def ledger_publish(
    *, agent: Agent, thread: Thread, run_id: str, events: list[tuple[str, dict[str, Any]]], actor: str = ""
) -> Published:
    """Append checked events (`events_check`) to the run's ledger, in order; see the module's steps."""
    run = ThreadRun.objects.select_for_update().filter(pk=run_id, agent=agent, thread=thread).first()
    if run is None:
        raise NotFound("Run")
    run.thread = thread
    if run.ledger_outcome:
        raise _ended(run)
    for index, (kind, _) in enumerate(events[:-1]):
        if kind in TERMINAL:
            raise Conflict(
                "run_settled",
                f"events[{index}] is {kind}: nothing may follow it (events[{index + 1}] does).",
                field=f"events[{index + 1}]",
            )
    now = timezone.now()
    before = run.ledger_seq
    rows = [
        RunEvent(agent=agent, thread=thread, run=run, seq=before + number, kind=kind, body=body, at=now)
        for number, (kind, body) in enumerate(events, start=1)
    ]
    RunEvent.objects.bulk_create(rows)
    run.ledger_seq = before + len(rows)
    fields = ["ledger_seq"]
    carrying = [row for row in rows if row.kind in CARRY_SNAPSHOT]
    if carrying:
        run.snapshot, run.snapshot_seq = carrying[-1].body["snapshot"], carrying[-1].seq
        fields += ["snapshot", "snapshot_seq"]
    last = rows[-1]
    if last.kind in TERMINAL:
        run.ledger_outcome = last.kind
        fields.append("ledger_outcome")
    window = settings.RUN_EVENTS_WINDOW
    if run.ledger_seq > window:
        RunEvent.objects.filter(run=run, seq__gt=max(0, before - window), seq__lte=run.ledger_seq - window).exclude(
            kind__in=TERMINAL
        ).delete()
    run.save(update_fields=fields)
    # The subject index (memoryapp.subjects.detect): events and a new snapshot naming a registered
    # person, in this transaction; a snapshot replaces the run's last, and so does what it named.
    kept = [row for row in rows if row.kind in TERMINAL or row.seq > run.ledger_seq - window]  # in the window
    mentions_record(agent=agent, rows=[(SubjectMention.Table.RUN_EVENT, row.pk, row) for row in kept])
    if carrying:
        mentions_record(agent=agent, rows=[(SubjectMention.Table.THREAD_RUN, run.pk, run)], replace=True)
    if last.kind in TERMINAL:
        audit_append(
            action="thread.run",
            actor=actor,
            agent_id=agent.pk,
            thread_id=thread.external_id,
            subject=run.id,
            outcome=last.kind,
            details={"events": run.ledger_seq},
            person=thread.user_id,
        )
    transaction.on_commit(functools.partial(_wake, run.id, run.ledger_seq))
    return Published(run=run, events=rows)
