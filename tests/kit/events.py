"""Change events as the tests read them: numbering inside a test's transaction, a real SSE client,
a local webhook receiver, and the service under gunicorn.

Events get their number when their transaction commits (a deferred constraint trigger). A test on
the `db` fixture never commits: `events_number_now()` fires the trigger as a commit would, so its
events can be read in the same transaction.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from django.db import connection

from tests.kit import PROJECT_ROOT
from tests.kit.servers import database_url, free_port

TRIGGER = "memoryapp_event_number_at_commit"


def events_number_now() -> None:
    """Number the events this transaction wrote so far, as its commit would (the `db` fixture's
    transaction never commits)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET CONSTRAINTS {TRIGGER} IMMEDIATE")
        cursor.execute(f"SET CONSTRAINTS {TRIGGER} DEFERRED")


# --- the service under gunicorn (gthread, as `make run` serves it) -------------------------------------


@contextmanager
def gunicorn_service(tmp_path: Path, *, threads: int = 4, env: dict[str, str] | None = None) -> Iterator[str]:
    """The service's WSGI application under gunicorn on the tests' database; yields host:port."""
    port = free_port()
    environment = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DB_CONN_MAX_AGE": "0",  # no connection outlives its request: the test database can be dropped
        "VAR_DIR": str(tmp_path),
        **(env or {}),
    }
    command = [sys.executable, "-m", "gunicorn", "memory_project.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    command += ["--worker-class", "gthread", "--threads", str(threads), "--workers", "1", "--timeout", "120"]
    command += ["--graceful-timeout", "5"]
    log_path = tmp_path / "gunicorn.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            # The port takes connections before the worker has loaded the application: wait for an
            # answer, so the first requests of a test are served in the order they are sent.
            assert process.poll() is None, log_path.read_text()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
                conn.close()
            except OSError:
                pass
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def http_json(where: str, method: str, path: str, key: str, body: Any = None) -> tuple[int, Any]:
    """One request to the service over HTTP; (status, JSON body)."""
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None)
    finally:
        conn.close()


# --- a Server-Sent Events client -------------------------------------------------------------------------


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: str

    @property
    def body(self) -> Any:
        return json.loads(self.data)


@dataclass
class SseClient:
    """Reads GET /api/v1/events over a real socket as EventSource does: frames, `id:` kept as the
    last event id, and a reconnect that sends it as Last-Event-ID."""

    where: str
    key: str
    query: str = ""
    last_event_id: str | None = None
    events: list[SseEvent] = field(default_factory=list)
    connections: int = 0
    retry_ms: int | None = None
    comments: list[str] = field(default_factory=list)
    status: int | None = None
    busy_retries: int = 30
    path: str = "/api/v1/events"

    def _open(self) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        host, port = self.where.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        conn.request("GET", self.path + (f"?{self.query}" if self.query else ""), headers=headers)
        response = conn.getresponse()
        self.status = response.status
        self.connections += 1
        return conn, response

    def read(self, *, until: Any = None, stop_after_events: int | None = None) -> None:
        """One connection: read frames until the server closes it, `until()` is true after a frame,
        or `stop_after_events` events came (then the client hangs up, as a dropped network would)."""
        conn, response = self._open()
        # A reconnect that comes before the server saw the dropped connection go finds the agent's
        # share of streams still held (429, Retry-After): wait and ask again, as the Python client does.
        for _ in range(self.busy_retries):
            if response.status != 429:
                break
            wait = float(response.getheader("Retry-After") or 1)
            conn.close()
            time.sleep(wait)
            conn, response = self._open()
        try:
            if response.status != 200:
                raise AssertionError(f"GET {self.path} answered {response.status}: {response.read()[:500]!r}")
            got = 0
            fields: dict[str, str] = {}
            data: list[str] = []
            while True:
                raw = response.readline()
                if not raw:
                    return  # the server closed the stream
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if "id" in fields:
                        self.last_event_id = fields["id"]
                    if data:
                        self.events.append(SseEvent(fields.get("id"), fields.get("event", "message"), "\n".join(data)))
                        got += 1
                    fields, data = {}, []
                    if stop_after_events is not None and got >= stop_after_events:
                        return
                    if until is not None and until():
                        return
                    continue
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                    continue
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    data.append(value)
                elif name == "retry":
                    self.retry_ms = int(value)
                else:
                    fields[name] = value
        finally:
            conn.close()

    def change_events(self) -> list[SseEvent]:
        return [e for e in self.events if e.id is not None]


# --- a webhook receiver ----------------------------------------------------------------------------------


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    status: int
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """A real HTTP server on localhost that answers 500 to its first `fail_first` deliveries (with
    `failure_body`), then 200, and keeps every request (headers and the raw body, to check
    signatures). With `redirect_to`, every answer is a 302 to that URL."""

    def __init__(
        self, *, fail_first: int = 0, failure_body: bytes = b'{"error": "down for a moment"}', redirect_to: str = ""
    ):
        self.fail_first = fail_first
        self.failure_body = failure_body
        self.redirect_to = redirect_to
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver.lock:
                    status = 500 if len(receiver.deliveries) < receiver.fail_first else 200
                    receiver.deliveries.append(
                        Delivery({k.lower(): v for k, v in self.headers.items()}, body, status, time.monotonic())
                    )
                if receiver.redirect_to:
                    status = receiver.deliveries[-1].status = 302
                payload = b'{"ok": true}' if status == 200 else receiver.failure_body
                self.send_response(status)
                if receiver.redirect_to:
                    self.send_header("Location", receiver.redirect_to)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/memory"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @contextmanager
    def running(self) -> Iterator[WebhookReceiver]:
        self.thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
