"""What the sync and the async client share: the retry policy, answers read into JSON or errors, pages."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx2

from memory_client.errors import error_for

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
