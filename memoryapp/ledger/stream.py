"""A run's events as a Server-Sent Events stream (GET /api/v1/threads/{id}/runs/{run_id}/events).

1. The stream starts after the client's position (`Last-Event-ID`, else `?after=`, else 0: the
   whole run as kept) and first sends `retry:`.
2. It sends every event after that position in order (`id: <seq>`, `event: <kind>`, `data: <json>`),
   at most BATCH read at a time; events the window deleted before the client read them are named by
   `event: gap` `{"from_seq", "to_seq"}` (deltas are kept only in a bounded window).
3. Nothing new: it waits for the run's wake-up on Redis pub/sub (memoryapp.ledger.services says why
   not NOTIFY), at most EVENTS_POLL_SECONDS, then reads again, so a lost wake-up (Redis away) costs
   one poll interval; a comment every KEEPALIVE_SECONDS keeps proxies from closing it.
4. It ends after sending `settled` or `faulted` (the run is over; `: run settled` as a comment), when
   the run is gone, or after EVENTS_STREAM_SECONDS (or `max_seconds`): the client reconnects with the
   last id it read and misses nothing, repeats nothing.

Each stream reads on its own database connection and its own Redis connection at its own pace: a
stream whose client stopped reading blocks its own web thread only (its write waits), never the
publisher or another stream.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings

from memoryapp.agents.limits import limits_redis
from memoryapp.ledger.selectors import BATCH, ledger_events_after, ledger_state, run_event_json
from memoryapp.ledger.services import TERMINAL, wake_channel
from memoryapp.models import ThreadRun

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
RETRY_MS = 1000


def _frame(*, data: dict[str, Any], event: str | None = None, id: int | None = None) -> str:
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return "\n".join(lines) + "\n\n"


class _Wakeups:
    """The run's wake-ups on Redis pub/sub; without Redis, plain waiting (the poll still finds events)."""

    def __init__(self, run_id: str):
        self._pubsub: Any = None
        try:
            pubsub = limits_redis().pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(wake_channel(run_id))
            self._pubsub = pubsub
        except redis.RedisError as error:
            logger.warning("run events: waiting without wake-ups (%s)", type(error).__name__)

    def wait(self, seconds: float) -> None:
        if self._pubsub is None:
            time.sleep(seconds)
            return
        began = time.monotonic()
        try:
            self._pubsub.get_message(timeout=seconds)
        except redis.RedisError:
            self.close()
            time.sleep(max(0.0, seconds - (time.monotonic() - began)))

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                self._pubsub.close()
            self._pubsub = None


def run_event_frames(
    *, run: ThreadRun, after: int, seconds: float | None = None, poll: float | None = None
) -> Iterator[str]:
    """The stream's text, frame by frame (see the module's steps)."""
    seconds = settings.EVENTS_STREAM_SECONDS if seconds is None else seconds
    poll = settings.EVENTS_POLL_SECONDS if poll is None else poll
    deadline = time.monotonic() + seconds
    wakeups = _Wakeups(run.pk)
    try:
        yield f"retry: {RETRY_MS}\n\n"
        position = after
        last_sent = time.monotonic()
        while True:
            rows = ledger_events_after(run=run, after=position)
            if rows and rows[0].seq > position + 1:
                yield _frame(event="gap", data={"from_seq": position + 1, "to_seq": rows[0].seq - 1})
            for row in rows:
                position = row.seq
                yield _frame(id=row.seq, event=row.kind, data=run_event_json(row))
                if row.kind in TERMINAL:
                    yield f": run {row.kind}; nothing follows\n\n"
                    return
            if rows:
                last_sent = time.monotonic()
                if len(rows) == BATCH:
                    continue
            last_seq, outcome = ledger_state(run_pk=run.pk)
            if outcome and position >= last_seq:
                # Ended at or before this position (or deleted with its run): nothing comes.
                yield f": run {outcome}; nothing follows\n\n"
                return
            if outcome:
                continue  # its end committed after the read above: read it
            now = time.monotonic()
            if now >= deadline:
                break
            if now - last_sent >= KEEPALIVE_SECONDS:
                yield ": keepalive\n\n"
                last_sent = now
            wakeups.wait(min(poll, max(0.0, deadline - now)))
        yield f": closing after {seconds:g} s; reconnect with Last-Event-ID: {position}\n\n"
    finally:
        wakeups.close()
