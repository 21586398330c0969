"""Fault tests of the web process under gunicorn (as `make run` starts it): requests that never finish
and a database that goes away (issue 23).

- A GET of /mcp/ that would wait on an event stream answers 405 at once, so abandoned ones hold no
  web thread.
- Slow partial bodies sent without a key are refused before they are read, so they hold no web
  thread either and /healthz keeps answering while they are still open.
- A database outage answers 503 `database_unavailable` with Retry-After, never a 500.

The server has few threads (2), so a handful of held requests would starve it. The tests wait with
generous deadlines (a hang is what fails) and never assert how long anything took.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from memoryapp.models import Thread
from tests.kit.api import Caller
from tests.kit.faults import DatabaseProxy
from tests.kit.servers import gunicorn_serving

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

# Far past any normal answer on a busy machine; a request held by a starved server never gets one.
DEADLINE = 60.0


def ask(where: str, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None) -> Any:
    """One request on a connection of its own: (status, headers, JSON body or raw bytes)."""
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        try:
            content: Any = json.loads(raw)
        except ValueError:
            content = raw
        return response.status, {k.lower(): v for k, v in response.getheaders()}, content
    finally:
        conn.close()


@contextmanager
def held_open(where: str, heads: list[bytes]) -> Iterator[list[socket.socket]]:
    """Connections that each send a request's head (and whatever part of a body it holds), then
    nothing more: kept open until the block ends."""
    host, port = where.rsplit(":", 1)
    with ExitStack() as stack:
        sockets = []
        for head in heads:
            sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=DEADLINE))
            sock.sendall(head)
            sockets.append(sock)
        yield sockets


def status_of(sock: socket.socket) -> int:
    """The status line of the answer a held connection got (waits for it, at most DEADLINE)."""
    line = b""
    while not line.endswith(b"\r\n"):
        part = sock.recv(1)
        if not part:
            break
        line += part
    return int(line.split()[1]) if line.startswith(b"HTTP/") else 0


def test_hung_mcp_gets_hold_no_web_thread_and_healthz_answers_meanwhile(alice: Caller, tmp_path: Path) -> None:
    with gunicorn_serving(var_dir=tmp_path, threads=2) as where:
        assert ask(where, "GET", "/healthz")[0] == 200  # the app is loaded
        host = where
        heads = [
            (f"GET /mcp/ HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {alice.key}\r\n{accept}\r\n").encode()
            for accept in ("Accept: text/event-stream\r\n", "", "Accept: text/event-stream\r\nLast-Event-ID: 3\r\n") * 4
        ]
        with held_open(where, heads) as sockets:
            status, _, body = ask(where, "GET", "/healthz")
            assert status == 200 and body == {"status": "ok"}
            assert [status_of(sock) for sock in sockets] == [405] * len(heads)


def test_slow_bodies_without_a_key_are_refused_unread_and_healthz_answers_meanwhile(
    alice: Caller, tmp_path: Path
) -> None:
    """28 requests that send a head and a few bytes of a large body, then stall (the probe that took
    /healthz down): each is a 401 before its body is read, plain and chunked bodies alike."""
    with gunicorn_serving(var_dir=tmp_path, threads=2) as where:
        assert ask(where, "GET", "/healthz")[0] == 200
        plain = (
            f"POST /api/v1/threads HTTP/1.1\r\nHost: {where}\r\nContent-Type: application/json\r\n"
            f"Content-Length: 1000000\r\n\r\n" + '{"id": "t-slow", "metadata": {"x": "'
        ).encode()
        chunked = (
            f"POST /api/v1/threads HTTP/1.1\r\nHost: {where}\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n10\r\n" + '{"id": "t-slow",'
        ).encode()
        wrong_key = plain.replace(b"Content-Type", b"Authorization: Bearer mk_00000000_nope\r\nContent-Type")
        mcp = plain.replace(b"POST /api/v1/threads", b"POST /mcp/")
        heads = [plain, chunked] * 12 + [wrong_key, wrong_key, mcp, mcp]
        with held_open(where, heads) as sockets:
            status, _, body = ask(where, "GET", "/healthz")
            assert status == 200 and body == {"status": "ok"}
            assert [status_of(sock) for sock in sockets] == [401] * len(heads)
            # Keyed requests are served meanwhile.
            answer = ask(where, "GET", "/api/v1/threads", headers={"Authorization": f"Bearer {alice.key}"})
            assert answer[0] == 200


def test_bodies_that_stall_with_a_valid_key_are_cut_at_the_deadline_and_healthz_answers_meanwhile(
    alice: Caller, tmp_path: Path
) -> None:
    """A client with a key that sends its body slowly holds a web thread while the view reads it:
    at most REQUEST_BODY_SECONDS (2 s here), then 408 `request_timeout` and the connection closes."""
    with gunicorn_serving(var_dir=tmp_path, threads=2, env={"REQUEST_BODY_SECONDS": "2"}) as where:
        assert ask(where, "GET", "/healthz")[0] == 200
        key = f"Authorization: Bearer {alice.key}\r\n"
        plain = (
            f"POST /api/v1/threads HTTP/1.1\r\nHost: {where}\r\n{key}Content-Type: application/json\r\n"
            f"Content-Length: 1000\r\n\r\n" + '{"id": "t-slow", "metadata": {"x": "'
        ).encode()
        chunked = (
            f"POST /api/v1/threads HTTP/1.1\r\nHost: {where}\r\n{key}Content-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n10\r\n" + '{"id": "t-slow",'
        ).encode()
        mcp = plain.replace(b"POST /api/v1/threads", b"POST /mcp/")
        heads = [plain, chunked, mcp] * 2
        with held_open(where, heads) as sockets:
            status, _, body = ask(where, "GET", "/healthz")
            assert status == 200 and body == {"status": "ok"}
            assert [status_of(sock) for sock in sockets] == [408] * len(heads)
        assert not Thread.objects.exists()


def test_a_database_outage_answers_503_with_retry_after_in_the_error_shape(
    alice: Caller, bob: Caller, tmp_path: Path
) -> None:
    proxy = DatabaseProxy()
    try:
        env = {"DATABASE_URL": proxy.url()}
        with gunicorn_serving(var_dir=tmp_path, threads=2, env=env) as where:
            key = {"Authorization": f"Bearer {alice.key}", "Content-Type": "application/json"}
            assert ask(where, "GET", "/api/v1/threads", headers=key)[0] == 200
            proxy.stop()

            # A key the processes keep (alice's) reaches the views, which need the database; a key
            # never seen before the outage (bob's) needs it to be looked up.
            unseen = {**key, "Authorization": f"Bearer {bob.key}"}
            for method, path, body, sent in (
                ("GET", "/api/v1/threads", None, key),
                ("POST", "/api/v1/threads", b'{"id": "t-outage"}', key),
                ("POST", "/api/v1/search", b'{"text": "anything"}', key),
                ("GET", "/api/v1/threads", None, unseen),
                ("POST", "/mcp/", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', unseen),
            ):
                status, headers, content = ask(where, method, path, body=body, headers=sent)
                assert status == 503, (path, status, content)
                assert content["error"]["code"] == "database_unavailable", content
                assert int(headers["retry-after"]) >= 1
            # Views outside the agent API's handler too: the staff API, and the admin as plain text.
            session = {"Cookie": "sessionid=" + "s" * 32}  # a staff member's session, looked up in the database
            status, headers, content = ask(where, "GET", "/api/v1/staff/exports/1", headers=session)
            assert status == 503 and content["error"]["code"] == "database_unavailable", content
            status, headers, content = ask(where, "GET", "/admin/", headers=session)
            assert status == 503 and int(headers["retry-after"]) >= 1, content
            assert ask(where, "GET", "/readyz")[0] == 503
            assert ask(where, "GET", "/healthz")[0] == 200
    finally:
        proxy.stop()
