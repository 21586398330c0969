"""Errors of the API as exceptions: each carries the one error shape `{"error": {"code", "message", "field"}}`."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An answer of 4xx or 5xx. `code`, `message` and `field` are the error shape's; `body` the whole JSON."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None, body: Any = None):
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.body = body

    @property
    def result(self) -> str | None:
        """A refused memory tool command's text for the model (the answer's `result`), if any."""
        return self.body.get("result") if isinstance(self.body, dict) else None


class BadRequestError(ApiError):
    """400: bad input (the field is named); nothing changed."""


class AuthenticationError(ApiError):
    """401: a missing, unknown or revoked key."""


class PermissionDeniedError(ApiError):
    """403: the key may not do that (a read-only request, a path memory keeps itself)."""


class NotFoundError(ApiError):
    """404: missing, or another agent's (the API does not tell them apart)."""


class ConflictError(ApiError):
    """409: the data changed meanwhile (a file's sha256, a race): read again and retry; or, with
    `code` "person_being_erased", a write of a person's own words (a message they sent, a thread
    about them) while their erasure runs: not to retry until it ended (`field` names them)."""


class PayloadTooLargeError(ApiError):
    """413: an entry, a batch, a file or a request over its limit."""


class RateLimitedError(ApiError):
    """429: too many requests (raised once the retries are spent)."""


class ServerError(ApiError):
    """5xx: the service's side (raised once the retries are spent)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    429: RateLimitedError,
}


def error_for(status: int, body: Any, text: str = "") -> ApiError:
    """The exception of an error answer: its class by status, its fields from the error shape."""
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        return kind(status, detail["code"], str(detail.get("message", "")), detail.get("field"), body)
    # Not the API's shape (a proxy's page, say): the status stands for the code.
    return kind(status, f"http_{status}", text[:500] or f"HTTP {status}", None, body)
