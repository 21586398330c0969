"""An agent's events as a Server-Sent Events stream (GET /api/v1/events), bounded in time.

The service runs under gunicorn's gthread workers: an open stream holds one of the process's
threads (and its database connection) for as long as it is open. So a stream:

1. starts after the position the client gives (`Last-Event-ID`, else `?after=`, else the newest
   event: only what comes next), and first sends `retry:` (how soon to reconnect) and, when the
   client gave no position, an `id:` line with the start, so a reconnect resumes from there;
2. sends every committed event after that position in order (`id: <seq>`, `event: <type>`,
   `data: <json>`), reading at most `BATCH` at a time, and names what retention deleted before the
   client could read it (`event: gap`);
3. when nothing is new, sleeps EVENTS_POLL_SECONDS between reads (one indexed query each) and
   sends a comment every KEEPALIVE_SECONDS so proxies keep the connection;
4. closes after EVENTS_STREAM_SECONDS (or the client's shorter `max_seconds`); EventSource then
   reconnects on its own with the last id it saw, so nothing is lost and nothing repeated.

Polling was chosen over LISTEN/NOTIFY: a NOTIFY in every writing transaction serializes the commits
of the whole database on the notification queue's lock, and LISTEN needs a session of its own,
which a transaction-pooling PgBouncer does not give (docs/operations.md, "External PostgreSQL and Redis").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings

from memoryapp.events.selectors import event_json, events_after, events_last_seq, events_missed

BATCH = 500
KEEPALIVE_SECONDS = 15.0
RETRY_MS = 1000


def _frame(*, data: dict[str, Any], event: str | None = None, id: int | None = None) -> str:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


def event_frames(
    *,
    agent_id: int,
    after: int | None,
    types: Sequence[str] | None = None,
    seconds: float | None = None,
    poll: float | None = None,
) -> Iterator[str]:
    """The stream's text, frame by frame (see the module's steps)."""
    seconds = settings.EVENTS_STREAM_SECONDS if seconds is None else seconds
    poll = settings.EVENTS_POLL_SECONDS if poll is None else poll
    deadline = time.monotonic() + seconds
    yield f"retry: {RETRY_MS}\n\n"
    position = after
    if position is None:
        position = events_last_seq(agent_id=agent_id)
        # Sets the client's last event id without an event: a reconnect resumes from here.
        yield f"id: {position}\n\n"
    last_sent = time.monotonic()
    while True:
        rows = events_after(agent_id=agent_id, after=position, limit=BATCH, types=types)
        if rows and rows[0].seq is not None and rows[0].seq > position + 1:
            missed = events_missed(agent_id=agent_id, after=position)
            if missed is not None:
                yield _frame(event="gap", data=missed.as_json())
        for row in rows:
            assert row.seq is not None
            position = row.seq
            yield _frame(id=row.seq, event=row.type, data=event_json(row))
        if rows:
            last_sent = time.monotonic()
            if len(rows) == BATCH:
                continue
        now = time.monotonic()
        if now >= deadline:
            break
        if now - last_sent >= KEEPALIVE_SECONDS:
            yield ": keepalive\n\n"
            last_sent = now
        time.sleep(min(poll, max(0.0, deadline - now)))
    yield f": closing after {seconds:g} s; reconnect with Last-Event-ID: {position}\n\n"


class StreamSlots:
    """How many streams this process serves at once (EVENTS_MAX_STREAMS: each holds a web thread), and
    how many of them one agent holds (EVENTS_MAX_STREAMS_PER_AGENT, every key of the agent together).

    Without the agent's share, one agent reconnecting in a loop held every slot and another agent
    got 15 refusals of 15 (issue 23): an agent at its share is refused (`AGENT_FULL`) while the
    process still has slots for the others.
    """

    TAKEN = "taken"
    AGENT_FULL = "agent_full"
    PROCESS_FULL = "process_full"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._by_agent: dict[int, int] = {}

    def take(self, agent_id: int) -> str:
        """TAKEN (give it back with `give_back`), AGENT_FULL or PROCESS_FULL."""
        with self._lock:
            if self._by_agent.get(agent_id, 0) >= settings.EVENTS_MAX_STREAMS_PER_AGENT:
                return self.AGENT_FULL
            if self._open >= settings.EVENTS_MAX_STREAMS:
                return self.PROCESS_FULL
            self._open += 1
            self._by_agent[agent_id] = self._by_agent.get(agent_id, 0) + 1
            return self.TAKEN

    def give_back(self, agent_id: int) -> None:
        with self._lock:
            self._open = max(0, self._open - 1)
            held = self._by_agent.pop(agent_id, 0) - 1
            if held > 0:
                self._by_agent[agent_id] = held

    @property
    def open(self) -> int:
        return self._open

    def held_by(self, agent_id: int) -> int:
        return self._by_agent.get(agent_id, 0)


STREAM_SLOTS = StreamSlots()


class HeldStream:
    """The frames of one stream, holding a slot until the response is closed (streamed to its end,
    or the client went away): Django calls `close()` either way, even before the first frame."""

    def __init__(self, frames: Iterator[str], *, agent_id: int, slots: StreamSlots = STREAM_SLOTS):
        self._frames = frames
        self._agent_id = agent_id
        self._slots = slots
        self._held = True

    def __iter__(self) -> Iterator[bytes]:
        for frame in self._frames:
            yield frame.encode()

    def close(self) -> None:
        if self._held:
            self._held = False
            self._slots.give_back(self._agent_id)
        close = getattr(self._frames, "close", None)
        if close is not None:
            close()
