"""The MCP endpoint (`/mcp/`, streamable HTTP): a Django view in front of the `mcp` SDK.

The service runs under gunicorn's gthread workers (WSGI), and the SDK's streamable HTTP transport
is an ASGI application. Rather than move every request of the service to an ASGI server for this
one endpoint, the view serves each MCP request in the SDK's stateless, JSON-response mode (one
JSON-RPC message in, one JSON answer out, nothing kept between requests), so:

1. the key is checked as the REST API checks it (`AgentKeyAuthentication`: a missing, unknown or
   revoked key is a 401 in the API's error shape, with `WWW-Authenticate: Bearer`), and the scope
   (user_id, project_id, thread_id, and the run's purpose) comes from the URL's query string, as the
   memory tool's does;
2. the body is read whole, at most the API's 32 MiB (413 beyond);
3. the request is handed to a fresh `StreamableHTTPSessionManager` (stateless, JSON responses) of
   `mcp_server` inside `async_to_sync`, with the caller in `CALLER`; its tools run their work back on
   this thread (`memoryapp.mcp.server`), so they use this request's database connection;
4. the ASGI answer (status, headers, body) becomes the Django response.

Stateless means no server-to-client requests (sampling, elicitation) and no GET event stream (405):
the memory tools need neither. Any number of web processes answer, as for the REST API.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import UnreadablePostError
from django.views.decorators.csrf import csrf_exempt
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework import exceptions

from memoryapp.api.auth import AgentKeyAuthentication
from memoryapp.api.errors import error_body, exception_handler
from memoryapp.api.limits import heavy_slot_held, key_rate_wait
from memoryapp.api.parsers import MAX_JSON_BODY_BYTES
from memoryapp.errors import TooManyRequests
from memoryapp.files.access import scope_value_check
from memoryapp.items.purposes import recall_purpose_check
from memoryapp.mcp.server import CALLER, McpCaller, mcp_server
from memoryapp.models import AgentKey

SCOPE_PARAMETERS = ("user_id", "project_id", "thread_id")
# Headers of the SDK's answer that the Django response sets itself (or that belong to one hop).
_OWN_HEADERS = {"content-length", "connection", "transfer-encoding", "keep-alive"}


@csrf_exempt
def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    """One MCP request (see the module's docstring)."""
    if request.method != "POST":
        return _method_refused(request)
    try:
        caller, key = _caller(request)
    except Exception as exc:
        return _refusal(exc)
    try:
        body = request.read(MAX_JSON_BODY_BYTES + 1)
    except UnreadablePostError as exc:  # cut off, or past REQUEST_BODY_SECONDS: 400 / 408
        return _refusal(exc)
    if len(body) > MAX_JSON_BODY_BYTES:
        return JsonResponse(
            error_body("request_too_large", f"A request body holds at most {MAX_JSON_BODY_BYTES} bytes."), status=413
        )
    try:
        # get_context builds a context: it holds one of the key's heavy-request slots, as the API's does.
        with heavy_slot_held(key=key, agent=caller.agent) if _builds_context(body) else nullcontext():
            status, headers, content = async_to_sync(_serve)(_asgi_scope(request, len(body)), body, caller)
    except TooManyRequests as exc:
        return _refusal(exc)
    response = HttpResponse(content, status=status)
    for name, value in headers:
        if name.lower() not in _OWN_HEADERS:
            response[name] = value
    return response


def _method_refused(request: HttpRequest) -> HttpResponse:
    """Every method but POST answers 405 at once, before the key is checked and the SDK is asked.

    Stateless, the SDK has nothing to serve on a GET (no session, no server-to-client messages), yet
    it would open an event stream and wait on it forever, holding the web thread: about 26 such
    requests made the whole API unresponsive (issue 23), and one with Last-Event-ID was a 500 with
    an empty body. A DELETE ends a session, which stateless has none of either.
    """
    response = JsonResponse(
        error_body(
            "method_not_allowed",
            f"The MCP endpoint takes POST only (stateless: no {request.method} event stream or session).",
        ),
        status=405,
    )
    response["Allow"] = "POST"
    return response


def _builds_context(body: bytes) -> bool:
    """Whether the JSON-RPC message calls the get_context tool (a batch: whether one of it does).

    The byte search only spares parsing a body that cannot name it: JSON may spell the name with
    escapes (`get\\u005fcontext`), which the SDK reads as get_context all the same."""
    if b"get_context" not in body and b"\\u" not in body:
        return False
    try:
        message = json.loads(body)
    except ValueError:
        return False
    messages = message if isinstance(message, list) else [message]
    return any(
        isinstance(m, dict)
        and m.get("method") == "tools/call"
        and isinstance(m.get("params"), dict)
        and m["params"].get("name") == "get_context"
        for m in messages
    )


def _caller(request: HttpRequest) -> tuple[McpCaller, AgentKey]:
    found = AgentKeyAuthentication().authenticate(request)  # type: ignore[arg-type]
    if found is None:
        raise exceptions.NotAuthenticated()
    user, key = found
    # The key's request rate, as every API request is limited (memoryapp.api.limits).
    wait = key_rate_wait(request, key=key, agent=user.agent)
    if wait is not None:
        raise exceptions.Throttled(wait=wait)
    for name in request.GET:
        if name not in (*SCOPE_PARAMETERS, "purpose"):
            raise exceptions.ValidationError({name: ["Unknown query parameter."]}, code="unknown_parameter")
    scope = {name: scope_value_check(name, request.GET.get(name, "")) for name in SCOPE_PARAMETERS}
    # The run's purpose (memoryapp.items.purposes): one of the agent's, or a 400 naming `purpose`.
    purpose = recall_purpose_check(agent=user.agent, purpose=request.GET.get("purpose", ""))
    return McpCaller(agent=user.agent, purpose=purpose, **scope), key


def _refusal(exc: Exception) -> HttpResponse:
    """An error before the SDK is asked, in the API's one error shape and status."""
    answer = exception_handler(exc, {"view": "mcp"})
    assert answer is not None  # the API's handler answers every exception
    response = JsonResponse(answer.data, status=answer.status_code)
    if answer.status_code == 401:
        response["WWW-Authenticate"] = "Bearer"
    if answer.has_header("Retry-After"):
        response["Retry-After"] = answer["Retry-After"]
    return response


def _asgi_scope(request: HttpRequest, length: int) -> dict[str, Any]:
    headers = [
        (name[5:].replace("_", "-").lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.META.items()
        if name.startswith("HTTP_") and name != "HTTP_CONTENT_LENGTH" and isinstance(value, str)
    ]
    if request.content_type:
        headers.append((b"content-type", request.META.get("CONTENT_TYPE", "").encode("latin-1")))
    # The body as read (a chunked one decoded): its real length.
    headers.append((b"content-length", str(length).encode()))
    host = request.get_host()  # checked against ALLOWED_HOSTS, as for every request
    name, _, port = host.rpartition(":") if host.rsplit(":", 1)[-1].isdigit() else (host, "", "")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": "",
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "server": (name or host, int(port) if port else (443 if request.is_secure() else 80)),
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
        "state": {},
    }


async def _serve(scope: dict[str, Any], body: bytes, caller: McpCaller) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run the SDK's transport for one request; the answer it sent, collected."""
    CALLER.set(caller)
    answered = anyio.Event()
    status = 500
    headers: list[tuple[str, str]] = []
    parts: list[bytes] = []
    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # The client stays connected until the answer is complete.
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    manager = StreamableHTTPSessionManager(
        # The SDK's own Client connects to an MCPServer's low-level server the same way.
        app=mcp_server._lowlevel_server,
        json_response=True,
        stateless=True,
        # Hosts are checked by Django (ALLOWED_HOSTS); a browser page cannot send the agent's key.
        security_settings=None,
        max_request_body_size=MAX_JSON_BODY_BYTES,
    )
    async with manager.run():
        await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
    return status, headers, b"".join(parts)
