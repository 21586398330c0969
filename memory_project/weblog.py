"""What the web server's logs say about a request: its route, never its path or query.

A path holds what clients chose and what identifies people: `/api/v1/threads/trip:p-ines/entries`
names a thread the client called after a person, `/api/v1/users/p-ines/forget` the person, a query
string holds search terms and admin filters. A log line outlives an erasure (it is in files,
terminals and log collectors the erasure cannot reach), so both logs the service writes name the
URL pattern the request matched instead (`/api/v1/threads/{thread_id}/entries`):

- gunicorn's access log, through `RouteAccessLogger` (memory_project.gunicorn_config names it):
  the request line, the path, the query and the referer are replaced;
- Django's request warnings and errors (`django.request`, `django.security.*`: "Not Found: ..."),
  through the logging filter `RouteOnly` (settings.LOGGING).

A path that matches no pattern is logged as `(no route)`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from django.urls import Resolver404, resolve
from gunicorn.glogging import Logger as GunicornLogger

NO_ROUTE = "(no route)"

# `<str:thread_id>` (path()) and `(?P<name>...)` (re_path()) become `{thread_id}` / `{name}`.
_CONVERTER = re.compile(r"<(?:[^<>:]+:)?([^<>]+)>")
_GROUP = re.compile(r"\(\?P<([^>]+)>(?:[^()]|\([^()]*\))*\)")


@functools.lru_cache(maxsize=1024)
def route_text(pattern: str) -> str:
    """`api/v1/threads/<str:thread_id>/entries` -> `/api/v1/threads/{thread_id}/entries`."""
    text = _GROUP.sub(lambda m: "{" + m[1] + "}", pattern)
    text = _CONVERTER.sub(lambda m: "{" + m[1] + "}", text)
    text = text.replace("^", "").replace("$", "").replace("\\", "")
    return "/" + text.lstrip("/")


def route_of_path(path_info: str) -> str:
    """The route a path resolves to, or NO_ROUTE."""
    try:
        match = resolve(path_info or "/")
    except (Resolver404, ValueError):
        return NO_ROUTE
    return route_text(match.route or "")


def route_of_request(request: HttpRequest) -> str:
    match = getattr(request, "resolver_match", None)
    if match is not None:
        return route_text(match.route or "")
    return route_of_path(getattr(request, "path_info", "") or "")


# Where the route Django matched is left for the access log: the request's WSGI environ, which
# gunicorn hands the access log (WSGIRequest.META is that very dict).
ROUTE_ENVIRON_KEY = "memory.route"


class RouteForAccessLogMiddleware:
    """Leaves the pattern of the route the request matched in its WSGI environ, so the access log
    names it without resolving the path a second time (that resolve was ~2% of an append's web
    CPU, issue 26). A request that matched no route (a 404, a static file) is resolved by the log."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: Any) -> None:
        match = request.resolver_match
        if match is not None:
            request.META[ROUTE_ENVIRON_KEY] = match.route or ""


class RouteOnly(logging.Filter):
    """For Django's loggers that take the request (`extra={"request": ...}`): every argument that is
    the request's path (as Django escapes it, or raw) becomes the route."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if not isinstance(request, HttpRequest) or not isinstance(record.args, tuple):
            return True
        paths = {request.path, request.path_info, request.get_full_path()}
        paths |= {p.encode("unicode_escape").decode("ascii") for p in list(paths)}
        route = route_of_request(request)
        record.args = tuple(route if isinstance(a, str) and a in paths else a for a in record.args)
        return True


class RouteAccessLogger(GunicornLogger):  # type: ignore[misc]
    """gunicorn's logger, whose access-log atoms name the route: `%(r)s` is `GET /api/v1/threads/
    {thread_id}/entries HTTP/1.1`, `%(U)s` the route, `%(q)s` empty, `%(f)s` (the referer, a URL of
    the admin with its filters) `-`."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        pattern = environ.get(ROUTE_ENVIRON_KEY)
        route = route_text(pattern) if isinstance(pattern, str) else route_of_path(str(environ.get("PATH_INFO") or ""))
        method = environ.get("REQUEST_METHOD") or "-"
        protocol = environ.get("SERVER_PROTOCOL") or "-"
        atoms.update({"r": f"{method} {route} {protocol}", "U": route, "q": "", "f": "-"})
        return atoms
