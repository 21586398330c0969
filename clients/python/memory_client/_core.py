"""What the sync and the async client share: the retry policy, answers read into JSON or errors, pages."""

from __future__ import annotations

import enum
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, urlsplit

import httpx2

from memory_client.errors import error_for
from memory_client.models import EventOut, MissedOut

# Methods whose repetition changes nothing more than the first call did.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# Answers that say the request did nothing (throttled, or busy and rolled back): safe to send again.
NOTHING_DONE = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before sending a request again.

    429 and 503 (the request did nothing) are retried for every method; other 5xx answers and
    connection errors only for idempotent methods (GET, PUT, DELETE), unless `retry_writes`: a
    POST that timed out may have been written. The wait doubles from `backoff` up to `max_backoff`
    with full jitter; a `Retry-After` header (seconds or a date) is followed, up to
    `max_retry_after` seconds.
    """

    attempts: int = 4
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 120.0
    retry_writes: bool = False

    def should_retry(self, *, method: str, status: int | None, attempt: int) -> bool:
        if attempt + 1 >= self.attempts:
            return False
        idempotent = method.upper() in IDEMPOTENT_METHODS or self.retry_writes
        if status is None:
            return idempotent
        if status in NOTHING_DONE:
            return True
        return status >= 500 and idempotent

    def delay(self, *, attempt: int, response: httpx2.Response | None) -> float:
        told = retry_after(response) if response is not None else None
        if told is not None:
            return min(told, self.max_retry_after)
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


def retry_after(response: httpx2.Response) -> float | None:
    """The wait a `Retry-After` header asks for, in seconds (None: none, or unreadable)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def answer_of(response: httpx2.Response) -> Any:
    """The JSON of a success, None for a 204, the text of a non-JSON success; an error raises."""
    body: Any
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.status_code >= 400:
        raise error_for(response.status_code, body, response.text)
    if body is None and response.content and response.status_code != 204:
        return response.text
    return body


def next_request(next_url: str | None) -> tuple[str, list[tuple[str, str]]] | None:
    """The path and query of a page's `next` link, to ask the client's own base URL for (a proxy in
    front of the service may have written another host into it)."""
    if not next_url:
        return None
    parts = urlsplit(next_url)
    return parts.path, parse_qsl(parts.query, keep_blank_values=True)


def without_none(**values: Any) -> dict[str, Any]:
    """Parameters the caller gave (None: left out, so the service's default holds)."""
    return {name: value for name, value in values.items() if value is not None}


def query_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class _Unchecked(enum.Enum):
    UNCHECKED = "unchecked"


UNCHECKED: Literal[_Unchecked.UNCHECKED] = _Unchecked.UNCHECKED
"""`expected_sha256=UNCHECKED` (the default): write whatever version is there; `None`: only if there is none."""
Unchecked = Literal[_Unchecked.UNCHECKED]


def types_value(types: str | Sequence[str] | None) -> str | None:
    """Event types as the API takes them: comma separated."""
    if types is None or isinstance(types, str):
        return types
    return ",".join(types)


# --- Server-Sent Events ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamEvent:
    """One event of the change stream (GET /api/v1/events).

    `type` is the change's (`entry.added` ...) with its ids in `change` (an `EventOut`: ids only,
    never content), or "gap" with `missed` the seqs retention deleted before they were read.
    `last_event_id` is the stream's position once this event is read: give it back as
    `last_event_id=` to go on after it, without loss or repeat.
    """

    type: str
    last_event_id: str | None
    change: EventOut | None = None
    missed: MissedOut | None = None
    # The event's data as sent (a run's event: `seq`, `kind`, `at` and the kind's fields).
    body: dict[str, Any] | None = None


class SseDecoder:
    """The WHATWG event-stream parser, a line at a time (lines without their line ends).

    Fields `event`, `data` (lines joined by newlines), `id` (kept across events: the last event id)
    and `retry` (milliseconds); comments (`:`) and unknown fields are skipped; a blank line ends an
    event, which is dispatched only when it had data (so an `id:` alone moves the position)."""

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last_event_id = last_event_id
        self.retry_ms: int | None = None
        self._event = ""
        self._data: list[str] = []

    def restart(self) -> None:
        """A new connection: what the last one left unfinished is dropped; the position stays."""
        self._event, self._data = "", []

    def feed(self, line: str) -> StreamEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self.last_event_id = value
        elif name == "retry" and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> StreamEvent | None:
        event, data = self._event or "message", self._data
        self._event, self._data = "", []
        if not data:
            return None
        body = json.loads("\n".join(data))
        if event == "gap":
            return StreamEvent(type=event, last_event_id=self.last_event_id, missed=cast(MissedOut, body), body=body)
        return StreamEvent(type=event, last_event_id=self.last_event_id, change=cast(EventOut, body), body=body)
