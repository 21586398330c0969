"""Start the service as `make run` does, in a directory of its own, and look at its processes.

Used by bench/memory.py (what the processes hold) and bench/cold_start.py (the first requests
after a start). The service runs `python -m memory_project.launcher` with its own VAR_DIR (so its
own embedded PostgreSQL), on 127.0.0.1 and a free port; REDIS_URL is passed through (unset: the
local Redis, or one the service starts in VAR_DIR). Nothing here listens on or calls anything
but loopback, and `Service.stop` ends what `Service.start` started, by its process group.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Client:
    """One keep-alive HTTP connection to the service, JSON in and out."""

    def __init__(self, port: int, key: str = "", timeout: float = 120.0):
        self.port, self.key, self.timeout = port, key, timeout
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        data = json.dumps(body) if body is not None else None
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                raw = response.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                self.close()
                if attempt:
                    raise
                continue
            try:
                return response.status, json.loads(raw) if raw else None
            except ValueError:
                return response.status, raw.decode(errors="replace")
        raise RuntimeError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass
class Service:
    """`make run` in a temporary VAR_DIR; `start()`, then `stop()` (also on exit of a with-block)."""

    env: dict[str, str] = field(default_factory=dict)
    var_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-service-")))
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0

    @property
    def log_path(self) -> Path:
        return self.var_dir / "run.log"

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("DATABASE_URL", "EMBEDDED_PGDATA", "DJANGO_SETTINGS_MODULE"):
            env.pop(name, None)
        env.update(
            VAR_DIR=str(self.var_dir),
            HOST="127.0.0.1",
            PORT=str(self.port),
            HF_HUB_OFFLINE="1",
            API_RATE_PER_MINUTE="0",
            API_HEAVY_CONCURRENCY="0",  # the waves send more searches at once than one key may by default
            PYTHONUNBUFFERED="1",
        )
        env.update(self.env)
        return env

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memory_project.launcher"],
            cwd=ROOT,
            env=self.environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started = time.monotonic()

    def readyz(self, timeout: float = 2.0) -> int:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            conn.request("GET", "/readyz")
            status = conn.getresponse().status
            conn.close()
            return status
        except OSError:
            return 0

    def wait_ready(self, limit: float = 900.0, poll: float = 0.1) -> float:
        """Seconds from `start()` to the first 200 of /readyz (as a load balancer polls it)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the service exited: {self.tail()}")
            if self.readyz() == 200:
                return time.monotonic() - self.started
            time.sleep(poll)
        raise RuntimeError(f"no /readyz after {limit:.0f} s: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def manage(self, *args: str) -> str:
        """`manage.py ARGS` against this service's database; its standard output."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.environment(),
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        return done.stdout

    def agent_key(self, slug: str) -> str:
        return self.manage("agent_create", slug).strip().splitlines()[-1]

    def stop(self, grace: float = 60.0) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # the launcher stops its children and the embedded servers
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)

    def remove(self) -> None:
        shutil.rmtree(self.var_dir, ignore_errors=True)

    def __enter__(self) -> Service:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- processes --------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def subtree(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    tree = tree if tree is not None else _children()
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(tree.get(current, []))
    return found


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of the process in kB, from /proc/PID/smaps_rollup; (0, 0) once it is gone."""
    rss = pss = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == "Rss":
                rss = int(rest.split()[0])
            elif name == "Pss":
                pss = int(rest.split()[0])
    return rss, pss


def cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def role_of(command: str) -> str:
    if "gunicorn" in command:
        return "web"
    if "celery" in command and " beat" in command:
        return "beat"
    if "celery" in command and " worker" in command:
        return "worker"
    return "other"


@dataclass
class RoleMemory:
    role: str
    processes: int = 0
    rss_kb: int = 0
    pss_kb: int = 0

    def line(self) -> str:
        return (
            f"  {self.role:<28} {self.processes:>2} processes   RSS {self.rss_kb / 1024:7.0f} MB"
            f"   PSS {self.pss_kb / 1024:7.0f} MB"
        )


def roles_memory(launcher_pid: int) -> dict[str, RoleMemory]:
    """The memory of the launcher's children by role (web, worker, beat), each with its subtree."""
    tree = _children()
    roles: dict[str, RoleMemory] = {"launcher": RoleMemory("launcher")}
    rss, pss = memory_kb(launcher_pid)
    roles["launcher"] = RoleMemory("launcher", 1, rss, pss)
    for child in tree.get(launcher_pid, []):
        role = role_of(cmdline(child))
        found = roles.setdefault(role, RoleMemory(role))
        for pid in subtree(child, tree):
            rss, pss = memory_kb(pid)
            found.processes += 1
            found.rss_kb += rss
            found.pss_kb += pss
    return roles
