"""Servers the tests talk to or start: free ports, the tests' database for another process, the
service itself under gunicorn, and a local HTTP server speaking a model provider's protocol."""

from __future__ import annotations

import json
import os
import signal
import socket
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
from urllib.parse import quote

from django.db import connection

from tests.kit import PROJECT_ROOT


def free_port() -> int:
    """A local TCP port nothing listens on (the system's pick; free when asked)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- the tests' database, for a process of their own ------------------------------------------


def database_url(*, name: str | None = None) -> str:
    """A DATABASE_URL for a server process or a command the tests start: the tests' database, or
    `name` on the same server (the embedded server's host is a socket directory)."""
    d = connection.settings_dict
    user, password = quote(d["USER"] or ""), quote(d["PASSWORD"] or "")
    database, host, port = name or d["NAME"], d["HOST"] or "", d["PORT"] or ""
    if host.startswith("/"):
        return f"postgres://{user}:{password}@/{database}?host={quote(host)}" + (f"&port={port}" if port else "")
    return f"postgres://{user}:{password}@{host}{':' + port if port else ''}/{database}"


def database_conninfo(*, name: str | None = None) -> str:
    """The same as a libpq conninfo string, for psycopg itself."""
    from psycopg.conninfo import make_conninfo

    d = connection.settings_dict
    return make_conninfo(
        dbname=name or d["NAME"],
        user=d["USER"] or None,
        password=d["PASSWORD"] or None,
        host=d["HOST"] or None,
        port=str(d["PORT"]) if d["PORT"] else None,
    )


# --- the service itself under gunicorn ---------------------------------------------------------------


@contextmanager
def gunicorn_serving(
    *, var_dir: Path, threads: int = 2, env: dict[str, str] | None = None, workers: int = 1
) -> Iterator[str]:
    """The service's WSGI application under gunicorn's gthread worker (as `make run` starts it), on
    the tests' database; yields where it listens (`127.0.0.1:PORT`). Tests that use it take
    `transactional_db`, so the server sees what they write; its connections close with each request,
    so the tests' tables can be emptied after each test. Its access log and its own log go to
    `var_dir / "gunicorn.log"`."""
    port = free_port()
    environment = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DB_CONN_MAX_AGE": "0",  # no connection outlives its request: the test database can be dropped
        "VAR_DIR": str(var_dir),
        **(env or {}),
    }
    command = [sys.executable, "-m", "gunicorn", "--config", "python:memory_project.gunicorn_config"]
    command += ["memory_project.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    command += ["--worker-class", "gthread", "--threads", str(threads), "--workers", str(workers), "--timeout", "120"]
    log_path = var_dir / "gunicorn.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        # The master loads the application (and a local model) before it binds: generous on a busy machine.
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
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


# --- a local HTTP server speaking a model provider's protocol --------------------------------------


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SeenRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ModelServer:
    """A real HTTP server on localhost answering from a list of replies, recording each request."""

    def __init__(self, replies: list[Reply]):
        self.replies = list(replies)
        self.seen: list[SeenRequest] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server.seen.append(
                    SeenRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}"))
                )
                reply = server.replies.pop(0) if server.replies else Reply(500, {"error": "no reply left"})
                payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @contextmanager
    def running(self) -> Iterator[ModelServer]:
        self.thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


# --- a local HTTP server speaking the Gemini API's embeddings protocol ------------------------------


class GeminiEmbeddingServer:
    """A real HTTP server on localhost that answers `POST /v1beta/models/{model}:embedContent` and
    `:batchEmbedContents` as the Gemini API does: the key in `x-goog-api-key` (403 without the
    right one), `{"embedding": {"values"}}` or `{"embeddings": [{"values"}]}`, each vector the
    deterministic fake embedder's vector of the text, scaled (Gemini's truncated vectors are not
    unit length) and cut to `outputDimensionality`. `failures` are statuses answered first, one a
    request; every request is recorded in `seen`."""

    def __init__(self, *, api_key: str, model: str = "gemini-embedding-001", native_dimensions: int = 768):
        from memoryapp.search.embedders import FakeEmbedder

        self.api_key, self.model = api_key, model
        self.failures: list[int] = []
        self.seen: list[SeenRequest] = []
        vectors = FakeEmbedder(native_dimensions)
        server = self

        def values(request: dict[str, Any]) -> list[float]:
            text = "".join(part.get("text", "") for part in request["content"]["parts"])
            full = [3.0 * x for x in vectors.embed_one(text)]
            return full[: int(request.get("outputDimensionality") or native_dimensions)]

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any]) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                server.seen.append(SeenRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if server.failures:
                    self._answer(server.failures.pop(0), {"error": {"code": 503, "status": "UNAVAILABLE"}})
                    return
                if self.headers.get("x-goog-api-key") != server.api_key:
                    self._answer(403, {"error": {"code": 403, "status": "PERMISSION_DENIED"}})
                    return
                name = f"models/{server.model}"
                if self.path == f"/v1beta/{name}:embedContent":
                    self._answer(200, {"embedding": {"values": values(body)}})
                elif self.path == f"/v1beta/{name}:batchEmbedContents":
                    if any(request.get("model") != name for request in body["requests"]):
                        self._answer(400, {"error": {"code": 400, "status": "INVALID_ARGUMENT"}})
                        return
                    self._answer(200, {"embeddings": [{"values": values(r)} for r in body["requests"]]})
                else:
                    self._answer(404, {"error": {"code": 404, "status": "NOT_FOUND"}})

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1beta"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @contextmanager
    def running(self) -> Iterator[GeminiEmbeddingServer]:
        self.thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()
