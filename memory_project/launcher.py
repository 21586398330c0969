"""`make run`: the whole service in one command.

1. Settings are loaded, which starts the embedded PostgreSQL and Redis when no URL is given.
2. Migrations are applied (after a clear check that the database has pgvector).
3. An admin account is created on the first start (ADMIN_PASSWORD, or generated and printed once).
4. The web server (gunicorn), a Celery worker and Celery beat run as child processes; one that
   exits (a crash, kill -9, out of memory) is started again after a delay (`supervise`).
5. Ctrl-C (or SIGTERM) stops the children, then the embedded servers this launcher started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

import django
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, connections

from governance.crypto.startup import encryption_refusal
from memory_project import embedded
from memory_project.env import env_int

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")


def _check_vector_available() -> None:

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if cursor.fetchone() is None:
            sys.exit(
                "The database has no pgvector extension (`vector`) available. Install pgvector on that "
                "server (or use the pgvector/pgvector image), or unset DATABASE_URL to use the embedded PostgreSQL."
            )


def _ensure_admin() -> None:

    users = get_user_model()
    if users.objects.filter(is_superuser=True).exists():
        return
    password = settings.ADMIN_PASSWORD or secrets.token_urlsafe(12)
    users.objects.create_superuser(settings.ADMIN_USERNAME, settings.ADMIN_EMAIL, password)
    shown = "(from ADMIN_PASSWORD)" if settings.ADMIN_PASSWORD else password
    print(
        f"\n  Admin account created: {settings.ADMIN_USERNAME} / {shown}  (shown once; change it in the admin)\n",
        flush=True,
    )


@dataclass(frozen=True)
class Backoff:
    """Delays between restarts of a child: `first` seconds, doubled after each exit that came less
    than `stable_after` seconds after its start, at most `longest`; back to `first` after a child
    stayed up `stable_after` seconds."""

    first: float = 1.0
    longest: float = 30.0
    stable_after: float = 60.0

    def next_delay(self, previous: float | None, uptime: float) -> float:
        if previous is None or uptime >= self.stable_after:
            return self.first
        return min(previous * 2, self.longest)


@dataclass
class _Child:
    name: str
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float | None = None
    restart_at: float = 0.0


def _say(line: str) -> None:
    print(line, flush=True)


def _start(child: _Child, say: Callable[[str], None]) -> None:
    # A session of its own: Ctrl-C in the terminal reaches the launcher only, which stops the
    # children in order.
    child.process = subprocess.Popen(child.command, start_new_session=True)
    child.started = time.monotonic()
    say(f"  {child.name} started (pid {child.process.pid})")


def _stop_all(children: list[_Child], grace: float) -> None:
    running = [c.process for c in children if c.process is not None and c.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def supervise(
    commands: dict[str, list[str]],
    *,
    stop: threading.Event,
    backoff: Backoff = Backoff(),
    grace: float = 15.0,
    say: Callable[[str], None] = _say,
) -> None:
    """Run each command as a child process until `stop` is set, restarting any that exits.

    1. Every command starts at once, each in a session of its own.
    2. A child that exits is told about (name, exit status, how long it ran) and started again
       after the delay `backoff` gives: a worker killed mid-job comes back in a second, a child
       that cannot start is tried again every `backoff.longest` seconds without a busy loop.
    3. Once `stop` is set, nothing is restarted: every child gets SIGTERM, and those still running
       `grace` seconds later are killed with their process group.
    """
    children = [_Child(name, command) for name, command in commands.items()]
    for child in children:
        _start(child, say)
    try:
        while not stop.is_set():
            now = time.monotonic()
            for child in children:
                if child.process is None:
                    if now >= child.restart_at and not stop.is_set():
                        _start(child, say)
                    continue
                code = child.process.poll()
                if code is None:
                    continue
                uptime = now - child.started
                child.delay = backoff.next_delay(child.delay, uptime)
                child.process = None
                child.restart_at = now + child.delay
                say(f"  {child.name} exited with {code} after {uptime:.1f}s; restarting it in {child.delay:g}s")
            stop.wait(0.2)
    finally:
        _stop_all(children, grace)


def stop_on_signals() -> threading.Event:
    """An event set by Ctrl-C (SIGINT) or SIGTERM: what `supervise` waits for to stop everything."""
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop


def main() -> int:

    django.setup()

    _check_vector_available()
    call_command("migrate", interactive=False, verbosity=0)
    if reason := encryption_refusal():
        sys.exit(reason)
    _ensure_admin()

    port = os.environ.get("PORT", "8000")
    host = os.environ.get("HOST", "127.0.0.1")
    python = sys.executable
    web_workers = os.environ.get("WEB_WORKERS", "3")
    web_threads = os.environ.get("WEB_THREADS", "4")
    worker_concurrency = os.environ.get("WORKER_CONCURRENCY", "2")
    # Background jobs (embedding above all) yield the CPU to requests when they share a machine.
    worker_nice = env_int("WORKER_NICE", 10, minimum=0, maximum=19)
    commands = {
        "web": [
            python,
            "-m",
            "gunicorn",
            # The access log on standard output, naming routes, not paths (memory_project.weblog).
            "--config",
            "python:memory_project.gunicorn_config",
            "memory_project.wsgi:application",
            "--bind",
            f"{host}:{port}",
            "--workers",
            web_workers,
            "--threads",
            web_threads,
            "--worker-class",
            "gthread",
            "--graceful-timeout",
            "10",
        ],
        "worker": [
            python,
            "-m",
            "celery",
            "-A",
            "memory_project",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            worker_concurrency,
            "-Q",
            ",".join(settings.CELERY_WORKER_QUEUES),
        ],
        "beat": [python, "-m", "celery", "-A", "memory_project", "beat", "--loglevel", "INFO"],
    }
    for name, command in commands.items():
        if name != "web" and worker_nice:
            commands[name] = ["nice", "-n", str(worker_nice), *command]
    # DB_POOL_SIZE is the web server's connection pool: the worker and beat keep a session each (a
    # job run's advisory lock lives in its worker's session).
    if env_int("DB_POOL_SIZE", 0, minimum=0, maximum=100):
        commands = {
            name: command if name == "web" else ["env", "DB_POOL_SIZE=0", *command]
            for name, command in commands.items()
        }

    stop = stop_on_signals()
    base = f"http://{host}:{port}"
    print(
        f"\n  Memory service running (web, worker, beat)\n"
        f"    admin:   {base}/admin/\n"
        f"    API:     {base}/api/v1/   docs: {base}/api/docs/\n"
        f"    health:  {base}/healthz   ready: {base}/readyz\n"
        f"    MCP:     {base}/mcp/\n"
        f"  A web, worker or beat process that exits is started again. Ctrl-C stops everything.\n",
        flush=True,
    )
    supervise(commands, stop=stop)

    connections.close_all()
    if settings.USES_EMBEDDED_POSTGRES:
        embedded.postgres_stop(settings.EMBEDDED_PGDATA)
    if not os.environ.get("REDIS_URL") and not embedded.redis_answers(*embedded.LOCAL_REDIS):
        embedded.redis_stop(settings.VAR_DIR)
    print("  stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
