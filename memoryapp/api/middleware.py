"""What every request is checked for before any view runs: an agent request's key before its body
is read (`KeyBeforeBodyMiddleware`), a NUL in its URL, a chunked body (`ChunkedBodyMiddleware`).

`%00` decodes to a NUL in a path segment or a query value; PostgreSQL refuses it in every text
comparison, so without this check each lookup by id (`/threads/a%00b`, `?place=...`) would have
to guard it alone. No id can hold one, so a path with a NUL names nothing (404); a query value
with one is a 400 naming the parameter, and so is a field of an admin form. Admin pages get the
same statuses without the JSON body.
"""

from __future__ import annotations

import io
import json
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from django.conf import settings
from django.contrib.auth import middleware as auth_middleware
from django.contrib.messages import middleware as messages_middleware
from django.contrib.sessions import middleware as sessions_middleware
from django.core.handlers.wsgi import LimitedStream
from django.db import InterfaceError, OperationalError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotFound,
    JsonResponse,
    QueryDict,
    StreamingHttpResponse,
)
from django.http.response import HttpResponseBase
from django.middleware import csrf as csrf_middleware
from rest_framework import exceptions

from memoryapp.api.auth import AgentKeyAuthentication
from memoryapp.api.errors import DATABASE_RETRY_AFTER_SECONDS, error_body, exception_handler
from memoryapp.api.parsers import MAX_JSON_BODY_BYTES

API_PREFIX = "/api/"
# The MCP endpoint takes JSON bodies as large as the API's, and answers errors in its shape.
JSON_BODY_PREFIXES = (API_PREFIX, "/mcp/", "/mcp")


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _nul_in(params: QueryDict, whole: str) -> str | None:
    for name, values in params.lists():
        if "\x00" in name:
            return whole
        if any("\x00" in value for value in values):
            return name
    return None


def _nul_parameter(request: HttpRequest, *, api: bool) -> str | None:
    found = _nul_in(request.GET, "query")
    # The admin's forms (a reviewer's edited value, a reason): the API takes JSON only, and
    # its parser names the field itself.
    if found is None and not api and request.method == "POST" and request.content_type in FORM_TYPES:
        found = _nul_in(request.POST, "form")
    return found


class RefuseNulInUrlMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path_info.startswith(API_PREFIX)
        if "\x00" in request.path_info:
            if api:
                return JsonResponse(error_body("not_found", "Not found."), status=404)
            return HttpResponseNotFound()
        parameter = _nul_parameter(request, api=api)
        if parameter is not None:
            message = f"{parameter}: NUL characters are not allowed."
            if api:
                return JsonResponse(error_body("invalid_text", message, parameter), status=400)
            return HttpResponseBadRequest(message)
        return self.get_response(request)


def _chunked_without_length(request: HttpRequest) -> bool:
    if request.META.get("CONTENT_LENGTH"):
        return False
    codings = request.META.get("HTTP_TRANSFER_ENCODING", "")
    return "chunked" in (coding.strip().lower() for coding in codings.split(","))


def _body_limit(*, api: bool) -> int:
    if api:
        return MAX_JSON_BODY_BYTES
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or MAX_JSON_BODY_BYTES


class ChunkedBodyMiddleware:
    """A body sent with `Transfer-Encoding: chunked` (and so without Content-Length) is read in
    full within the body limit, or refused: never taken as empty.

    Django sizes a body by Content-Length alone; without one it reads nothing, and a view sees an
    empty body: an import answered 201 with an empty thread, a PATCH 200 changing nothing.

    1. A server that decodes the chunks says so (`wsgi.input_terminated`, as gunicorn does): the
       decoded body is read to its end, at most the limit + 1 byte (the API's 32 MiB; a page's
       DATA_UPLOAD_MAX_MEMORY_SIZE): past the limit, a 413.
    2. The request goes on as if it had come with that Content-Length, so every later step
       (DRF's parsers, Django's form parsing and its own limits) reads it as usual.
    3. A server that hands over the raw chunks (Django's runserver and test server) gets a 411:
       send a Content-Length. Its answer has no length of its own, so that server closes the
       connection rather than read the unread chunks as the next request.
    4. Chunks the server cannot decode (a size that is not hex, a chunk without its line end, a
       body cut off) are a 400 `invalid_body` naming the body, not a 500. Where the next request
       would start is then unknown, so the connection is closed: gunicorn does so itself once a
       read of the body failed, and the answer has no length of its own for servers that go by that.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not _chunked_without_length(request):
            return self.get_response(request)
        api = request.path_info.startswith(JSON_BODY_PREFIXES)
        environ = getattr(request, "environ", {})
        if not environ.get("wsgi.input_terminated"):
            message = "This server cannot read a chunked body: send it with a Content-Length."
            return _refusal(411, "length_required", message, api=api, close=True)
        limit = _body_limit(api=api)
        stream, parts, size = environ["wsgi.input"], [], 0
        try:
            while size <= limit:
                part = stream.read(min(64 * 1024, limit + 1 - size))
                if not part:
                    break
                parts.append(part)
                size += len(part)
        except BodyTimeout as exc:
            return _refusal(408, "request_timeout", str(exc), api=api, close=True, field="body")
        except _unreadable_body_errors():
            message = "The chunked request body could not be read: its chunks are malformed or cut off."
            return _refusal(400, "invalid_body", message, api=api, close=True, field="body")
        if size > limit:
            return _refusal(413, "request_too_large", f"A request body holds at most {limit} bytes.", api=api)
        body = b"".join(parts)
        request.META["CONTENT_LENGTH"] = str(len(body))
        # WSGIRequest fixed its stream at Content-Length 0 when it was made: give it the body read.
        request._stream = io.BytesIO(body)  # type: ignore[attr-defined]
        return self.get_response(request)


def _unreadable_body_errors() -> tuple[type[BaseException], ...]:
    """What reading a chunked body raises when its chunks are bad: gunicorn's parse errors
    (InvalidChunkSize, ChunkMissingTerminator, NoMoreData, ...; imported here, as only a process
    under gunicorn can meet them), and a socket's or a stream's own errors."""
    errors: tuple[type[BaseException], ...] = (OSError, ValueError)
    try:
        from gunicorn.http.errors import ParseException
    except ImportError:  # another server: its own errors are among the ones above, or its own 400
        return errors
    return (ParseException, *errors)


def _refusal(
    status: int, code: str, message: str, *, api: bool, close: bool = False, field: str | None = None
) -> HttpResponseBase:
    content_type = "application/json" if api else "text/plain; charset=utf-8"
    content = json.dumps(error_body(code, message, field)).encode() if api else message.encode()
    if close:
        return StreamingHttpResponse(iter([content]), status=status, content_type=content_type)
    return HttpResponse(content, status=status, content_type=content_type)


# Agent requests: the API (but the staff's export API, which takes an admin session) and the MCP endpoint.
_AGENT_PREFIXES = ("/api/v1/", "/mcp/", "/mcp")
_STAFF_PREFIX = "/api/v1/staff/"


def agent_request(request: HttpRequest) -> bool:
    """A request to the agent API or the MCP endpoint: authenticated by its key alone, never by a
    session or a cookie (the staff's export API, under the same prefix, takes an admin session)."""
    path = request.path_info
    return path.startswith(_AGENT_PREFIXES) and not path.startswith(_STAFF_PREFIX)


class _BrowserPagesOnly:
    """A middleware of the browser pages (the admin, the console, the docs) that an agent request
    goes past untouched: it has no session, no CSRF cookie, no logged-in user and no messages, so
    each of these four only made and dropped objects for it (a session store, a cookie parse, the
    messages' cookie and session storages and their signer): 2-9% of a single append's CPU in
    Django's handler (issue 26, bench/handler_cpu.py). Its answer is the same: none of the four
    adds a header or a cookie to a response whose request did not use them. The CSRF check of a
    view (`process_view`) still runs for every request; the agent API's views are exempt from it,
    as before."""

    get_response: Callable[[HttpRequest], Any]

    def __call__(self, request: HttpRequest) -> Any:
        if agent_request(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class SessionMiddleware(_BrowserPagesOnly, sessions_middleware.SessionMiddleware):
    pass


class CsrfViewMiddleware(_BrowserPagesOnly, csrf_middleware.CsrfViewMiddleware):
    pass


class AuthenticationMiddleware(_BrowserPagesOnly, auth_middleware.AuthenticationMiddleware):
    pass


class MessageMiddleware(_BrowserPagesOnly, messages_middleware.MessageMiddleware):
    pass


def _has_body(request: HttpRequest) -> bool:
    return _chunked_without_length(request) or request.META.get("CONTENT_LENGTH", "") not in ("", "0")


# A refused request's body is discarded only while it keeps coming: at most this long in all, and
# at most this long without a byte (a client that stalls is cut at once).
DISCARD_SECONDS = 1.0
DISCARD_STALL_SECONDS = 0.25


def body_discard(request: HttpRequest) -> None:
    """The body of a request refused before it was read: thrown away if it arrives at once, else
    the connection takes no more of it.

    Before it serves the next request of a connection, gunicorn drains what the view left of a body,
    in a web thread, for up to 5 s, and a stalled or trickling client has it wait all that time: 28
    slow bodies sent without a key held every thread and /healthz went down (issue 23). So:

    1. The body is read and dropped while it comes quickly (a client that sent a wrong key with a
       whole body): the connection stays usable and the client reads its 401 as usual.
    2. A body that stalls DISCARD_STALL_SECONDS, or is not over within DISCARD_SECONDS, or passes
       the body limit: the socket's read side is shut, so gunicorn's drain ends at once and the
       connection closes (the client may see it reset: it was sending a body nobody reads).

    Another server (Django's test server) has no `gunicorn.socket`: nothing to do.
    """
    sock, stream = request.META.get("gunicorn.socket"), request.META.get("wsgi.input")
    if not isinstance(sock, socket.socket) or stream is None:
        return
    deadline = time.monotonic() + DISCARD_SECONDS
    left = MAX_JSON_BODY_BYTES + 1
    try:
        while left > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the body did not arrive in time")
            sock.settimeout(min(DISCARD_STALL_SECONDS, remaining))
            part = stream.read(min(64 * 1024, left))
            if not part:
                return  # all of it: the connection can serve the client's next request
            left -= len(part)
        raise ValueError("the body is larger than any request may be")
    except Exception:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RD)
    finally:
        with suppress(OSError):
            sock.settimeout(None)


class KeyBeforeBodyMiddleware:
    """An agent request that carries a body is authenticated before any of the body is read.

    1. Only requests with a body (a Content-Length, or chunked) to the agent API or the MCP
       endpoint are looked at; the rest go on untouched (their views authenticate as always).
    2. The key is checked as the views check it (`AgentKeyAuthentication`: the failed
       authentication limit, the lookup, the audit of a failure); the key found is kept on the
       request, so the view does not look it up again.
    3. No key, a wrong one, or an address or prefix past its failures: the answer (401 or 429, in
       the error shape) is sent at once, the body unread (then discarded only while it comes at once: `body_discard`), so a
       client without a key never holds a web thread while it sends a body slowly.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not agent_request(request) or not _has_body(request):
            return self.get_response(request)
        try:
            if AgentKeyAuthentication().authenticate(request) is None:
                raise exceptions.NotAuthenticated()
        except Exception as exc:
            body_discard(request)
            return _error_response(exc)
        return self.get_response(request)


def _error_response(exc: Exception) -> HttpResponse:
    """The API's answer to an exception (its one handler), as a plain Django response."""
    answer = exception_handler(exc, {"view": "middleware"})
    assert answer is not None  # the API's handler answers every exception
    response = JsonResponse(answer.data, status=answer.status_code)
    for header in ("WWW-Authenticate", "Retry-After"):
        if answer.has_header(header):
            response[header] = answer[header]
    return response


class BodyTimeout(OSError):
    """A request body that did not arrive within REQUEST_BODY_SECONDS (see `BodyDeadlineMiddleware`)."""


class DeadlineStream:
    """A request's input stream whose reads end by a deadline: each read waits on the socket at most
    until then, and past it raises BodyTimeout with the socket's read side shut (the connection
    closes without gunicorn draining or lingering on the rest)."""

    def __init__(self, stream: Any, sock: socket.socket, deadline: float, seconds: float):
        self._stream, self._sock, self._deadline, self._seconds = stream, sock, deadline, seconds

    def _expired(self) -> BodyTimeout:
        with suppress(OSError):
            self._sock.shutdown(socket.SHUT_RD)
        return BodyTimeout(f"The request body did not arrive within {self._seconds:g} s.")

    def _bounded(self, read: Callable[[], bytes]) -> bytes:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self._expired()
        try:
            self._sock.settimeout(remaining)
            return read()
        except TimeoutError as exc:  # socket.timeout is TimeoutError
            raise self._expired() from exc
        finally:
            with suppress(OSError):
                self._sock.settimeout(None)

    def read(self, size: int | None = -1) -> bytes:
        return self._bounded(lambda: self._stream.read(size))

    def readline(self, size: int | None = -1) -> bytes:
        return self._bounded(lambda: self._stream.readline(size))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class BodyDeadlineMiddleware:
    """Every request body must arrive within REQUEST_BODY_SECONDS of its headers (under gunicorn,
    whose gthread worker reads a body in a web thread without any time limit: a client sending
    it slowly, with a key or to an admin form, held that thread for as long as it liked).

    The WSGI input is wrapped in a `DeadlineStream` before anything reads it (the chunked body's
    middleware, Django's request stream, DRF's parsers); past the deadline a read raises
    BodyTimeout: a 408 `request_timeout` naming `body` (the API's error shape under /api/ and /mcp),
    and the connection closes. Another server (Django's test server) has no `gunicorn.socket`:
    nothing to do.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        sock = request.META.get("gunicorn.socket")
        seconds = settings.REQUEST_BODY_SECONDS
        if isinstance(sock, socket.socket) and seconds > 0 and _has_body(request):
            wrapped = DeadlineStream(request.META["wsgi.input"], sock, time.monotonic() + seconds, seconds)
            request.META["wsgi.input"] = wrapped
            length = int(request.META.get("CONTENT_LENGTH") or 0)
            request._stream = LimitedStream(wrapped, length)  # type: ignore[assignment, arg-type]
        return self.get_response(request)


class DatabaseOutageMiddleware:
    """A view outside the agent API's own handler (the staff API, the admin, health pages) that meets
    a database away answers 503 with Retry-After too, not a 500: in the API's error shape under
    /api/, as plain text elsewhere. (DRF's views answer it through the API's exception handler.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponseBase | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        if request.path_info.startswith(JSON_BODY_PREFIXES):
            return _error_response(exception)
        response = HttpResponse(
            f"The database cannot be reached right now; retry in {DATABASE_RETRY_AFTER_SECONDS} s.",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
        return response
