"""The one exception type of the domain: a code, a message and, when input caused it, the field
(and, for a few errors, ids a program acts on: `details`, merged into the error's body)."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 400

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details or {}
        if status is not None:
            self.status = status


class NotFound(DomainError):
    status = 404

    def __init__(self, what: str, *, field: str | None = None):
        super().__init__("not_found", f"{what} was not found.", field=field)


class Conflict(DomainError):
    status = 409

    def __init__(self, code: str, message: str, *, field: str | None = None, details: dict[str, Any] | None = None):
        super().__init__(code, message, field=field, details=details)


class TooManyRequests(DomainError):
    """429: a limit of the caller's was reached; `retry_after` seconds is when to try again."""

    status = 429

    def __init__(self, code: str, message: str, *, retry_after: int):
        super().__init__(code, message)
        self.retry_after = retry_after
