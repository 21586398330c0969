"""The CPU of one request through Django's WSGI handler, in a process of its own: single appends and
`/healthz` (and with `--kinds`, reads of a thread's entries or its path, batch appends of 100,
hybrid context builds and searches), and with `--against` the same for another checkout, in blocks
taking turns.

    python bench/handler_cpu.py --key mk_... [--against /path/to/other/checkout] [--blocks 20] [--per-block 40]
        [--kinds healthz,append,entries,batch,path,context,search]

On a machine shared with other work, the web processes' CPU per request moves by 20% between runs
of bench/write_entries.py minutes apart (issue 26): a change worth a few percent is lost in it. This
bench leaves out gunicorn and the clients (their cost is the same for every request, /healthz's
included) and measures the rest where that noise is smallest:

1. One process per checkout (`--against`: the other one), each with the service's settings from
   the environment (run it as the service runs: same VAR_DIR, REDIS_URL, EMBEDDER...), so both
   reach the running service's database and Redis as `--key`'s agent.
2. Each creates a thread of its own and warms up (the first requests load what a web process loads).
3. Blocks take turns: each process in turn answers `--per-block` /healthz requests, then as many
   single appends to its thread (the request of bench/write_entries.py) and, with `--kinds`, as many
   reads of its thread's newest 50 entries (`GET /api/v1/threads/{id}/entries`), batch appends of
   `BATCH` entries (the batch phase's request of bench/write_entries.py), reads of its path's
   newest 50 (`path`), hybrid context builds of 4,000 tokens on it (`context`) and hybrid searches
   (`search`) of one fixed question (its vector cached after the first: the model's encode is
   left out, bench/load.py --fresh-queries has it), through
   `memory_project.wsgi.application` with the environ gunicorn would give it; the process's CPU
   time (`time.process_time`) of each block is read by the process itself. Which process goes
   first alternates, so a burst of other load falls on both.
4. Prints, per checkout, the median CPU per request of each kind, each kind's ratio to /healthz,
   and with `--against` the median over blocks of this checkout's CPU per request over the other's.

The threads are left (their ids start with `handler-cpu-`). It never asserts a duration.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("healthz", "append", "entries", "batch", "path", "context", "search")
QUESTION = "Which museum did we plan for the morning?"
TURN = "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum."
BATCH = 100  # entries of a batch append, as bench/write_entries.py sends them by default


# --- the measuring process (`--serve`) ----------------------------------------------------------


def serve(root: Path, key: str) -> None:
    """Answer `<kind> <n>` lines on stdin with the CPU seconds of n requests of that kind."""
    os.chdir(root)
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
    from memory_project.wsgi import application

    def call(method: str, path: str, body: Any = None, query: str = "") -> str:
        data = json.dumps(body).encode() if body is not None else b""
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_AUTHORIZATION": f"Bearer {key}",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        status: list[str] = []

        def start_response(line: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(line)
            return lambda data: None

        answer = application(environ, start_response)
        b"".join(answer)
        answer.close()  # type: ignore[attr-defined]
        return status[0]

    thread_id = f"handler-cpu-{uuid.uuid4().hex[:8]}"
    created = call("POST", "/api/v1/threads", {"id": thread_id})
    if not created.startswith("201"):
        sys.exit(f"cannot create a thread: {created}")
    sent = 0

    def one(kind: str) -> None:
        nonlocal sent
        if kind == "healthz":
            status = call("GET", "/healthz")
        elif kind == "entries":
            status = call("GET", f"/api/v1/threads/{thread_id}/entries", query="limit=50")
        elif kind == "batch":
            turns = [{"role": ("user", "assistant")[i % 2], "content": f"[{sent}.{i}] {TURN}"} for i in range(BATCH)]
            status = call("POST", f"/api/v1/threads/{thread_id}/entries", {"entries": turns})
            sent += 1
        elif kind == "path":
            status = call("GET", f"/api/v1/threads/{thread_id}/path", query="limit=50")
        elif kind == "context":
            body = {"strategy": "hybrid", "max_tokens": 4000, "current_input": QUESTION}
            status = call("POST", f"/api/v1/threads/{thread_id}/context", body)
        elif kind == "search":
            status = call("POST", "/api/v1/search", {"text": QUESTION, "method": "hybrid"})
        else:
            body = {"role": "user" if sent % 2 == 0 else "assistant", "content": f"[{sent}] {TURN}"}
            status = call("POST", f"/api/v1/threads/{thread_id}/entries", body)
            sent += 1
        if not status.startswith(("200", "201")):
            sys.exit(f"{kind} answered {status}")

    for _ in range(60):  # the thread holds at least the 50 entries a read answers
        one("healthz")
        one("append")
        one("entries")
    for kind in ("path", "context", "search"):  # the question's vector is cached after its first use
        one(kind)
    print("ready", flush=True)
    for line in sys.stdin:
        kind, count = line.split()
        began = time.process_time()
        for _ in range(int(count)):
            one(kind)
        print(time.process_time() - began, flush=True)


# --- the controller -----------------------------------------------------------------------------


class Measured:
    """One checkout's measuring process, and the CPU per request of each of its blocks."""

    def __init__(self, root: Path, key: str, kinds: tuple[str, ...]):
        self.root = root
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(root), "--key", key],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.blocks: dict[str, list[float]] = {kind: [] for kind in kinds}

    def ready(self) -> None:
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            sys.exit(f"the measuring process of {self.root} did not start")

    def block(self, kind: str, count: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{kind} {count}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            sys.exit(f"the measuring process of {self.root} stopped")
        self.blocks[kind].append(float(line) / count)

    def median(self, kind: str) -> float:
        return statistics.median(self.blocks[kind])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", required=True, help="an agent's API key (its rate limit off: see write_entries.py)")
    parser.add_argument("--against", type=Path, help="another checkout, measured in turns with this one")
    parser.add_argument("--blocks", type=int, default=20, help="blocks of each kind per checkout (default 20)")
    parser.add_argument("--per-block", type=int, default=40, help="requests per block (default 40)")
    parser.add_argument(
        "--kinds",
        default="healthz,append",
        help=f"the kinds of request measured, of {','.join(KINDS)} (default healthz,append; /healthz always)",
    )
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.key)
        return
    kinds = tuple(k for k in KINDS if k == "healthz" or k in args.kinds.split(","))
    if unknown := set(args.kinds.split(",")) - set(KINDS):
        parser.error(f"--kinds: unknown {', '.join(sorted(unknown))}")

    checkouts = [ROOT] + ([args.against.resolve()] if args.against else [])
    measured = [Measured(root, args.key, kinds) for root in checkouts]
    try:
        for m in measured:
            m.ready()
        for number in range(args.blocks):
            for m in measured if number % 2 == 0 else reversed(measured):
                for kind in kinds:
                    m.block(kind, args.per_block)
    finally:
        for m in measured:
            m.close()
    print(f"{args.blocks} blocks of {args.per_block} requests of each kind per checkout, taking turns")
    names = {
        "append": "single append",
        "entries": "entries read (50)",
        "batch": f"batch append ({BATCH})",
        "path": "path read (50)",
        "context": "context build",
    }
    for m in measured:
        healthz = m.median("healthz")
        line = f"{m.root!s:<40} /healthz {healthz * 1000:6.3f} ms"
        for kind in kinds[1:]:
            cpu = m.median(kind)
            line += f"   {names.get(kind, kind)} {cpu * 1000:6.3f} ms = {cpu / healthz:5.2f}x /healthz"
        print(line)
    if len(measured) == 2:
        this, other = measured
        for kind in kinds:
            pairs = [a / b for a, b in zip(this.blocks[kind], other.blocks[kind], strict=True)]
            print(f"{kind}: this checkout / the other, median over blocks {statistics.median(pairs):.3f}")


if __name__ == "__main__":
    main()
