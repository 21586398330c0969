"""How fast agents can write conversation entries over HTTP, against raw inserts of the same rows.

Against the running service (`make run`), as one agent (`--key`):

0. single appends, one client alone: the latency of an append when nothing else is sent;
1. single appends, own threads: N clients, each appending `--entries` entries one request at a
   time to a thread of its own;
2. single appends, one shared thread: the same N clients all appending to one thread (they
   queue on its row lock: this is the contended case);
3. batch appends: N clients, each sending `--batches` requests of `--batch-size` entries;
4. the physical baseline, in the same run: the same number of rows as phase 3 inserted into
   `memoryapp_entry` with raw psycopg by N connections, one transaction per `--batch-size` rows
   (executemany, or COPY with `--baseline copy`), and as many single-row transactions as
   phase 1 for the single-append comparison.

Prints entries/s and p50/p95/p99 latency of each phase, the baseline rates and the ratios, and
the web processes' CPU per request of each HTTP phase (read from /proc of the gunicorn master bound
to the port of --base and its workers, when they run on this machine) next to that of a `/healthz`
phase of as many requests by the same clients, measured in the same run.
Every thread it makes is deleted at the end (`--keep` keeps them).

    python bench/write_entries.py --base http://127.0.0.1:8000 --key mk_... [--clients 8] [--naming]

`--naming` registers two people with the agent and names both in every turn: with encryption on,
each turn is then sealed under a key set (docs/security.md "Rows of several people: key sets").

The key's rate limit (API_RATE_PER_MINUTE, 600 a minute by default) would answer most of these
requests 429: set the bench agent's `rate_limit_per_minute` to 0 on its admin page (or start the
service with API_RATE_PER_MINUTE=0) before a run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

SENTENCES = (
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum.",
    "We are vegetarian, and my daughter does not like long walks in the afternoon heat.",
    "Then lunch near Campo de' Fiori, a siesta, and the Pantheon after five o'clock.",
)


# --- HTTP ------------------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP connection to the service (one per worker thread)."""

    def __init__(self, base: str, key: str):
        parts = urlsplit(base)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.connection: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.connection is None:
            kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self.connection = kind(self.host, self.port, timeout=120)
        return self.connection

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            connection = self._connect()
            try:
                connection.request(method, self.prefix + path, body=data, headers=self.headers)
                response = connection.getresponse()
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
            except (http.client.HTTPException, ConnectionError, OSError):
                # The server closed an idle keep-alive connection: reconnect once.
                connection.close()
                self.connection = None
                if attempt:
                    raise
        raise RuntimeError("unreachable")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


@dataclass
class Phase:
    name: str
    entries: int = 0
    seconds: float = 0.0
    requests: int = 0
    web_cpu: float | None = None  # the web processes' CPU seconds during the phase
    latencies: list[float] = field(default_factory=list)
    errors: dict[int, int] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.entries / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        if len(self.latencies) == 1:
            return self.latencies[0]
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[int(p) - 1]

    def cpu_per_request(self) -> float | None:
        return self.web_cpu / self.requests if self.web_cpu is not None and self.requests else None

    def line(self, healthz: Phase | None = None) -> str:
        errors = f"  errors {self.errors}" if self.errors else ""
        cpu = self.cpu_per_request()
        if cpu is not None:
            base = healthz.cpu_per_request() if healthz is not None else None
            versus = f" = {cpu / base:4.1f}x healthz" if base else ""
            errors = f"  web CPU {cpu * 1000:5.2f} ms/req{versus}{errors}"
        return (
            f"{self.name:<34} {self.entries:>7} entries in {self.seconds:6.2f}s = {self.rate:9.1f} entries/s"
            f"   latency p50 {self.percentile(50) * 1000:7.2f} ms  p95 {self.percentile(95) * 1000:7.2f} ms"
            f"  p99 {self.percentile(99) * 1000:7.2f} ms{errors}"
        )


# With --naming: two people the run registers with the agent, named by every turn (the mixed-person
# case: with encryption on, each turn is sealed under the key set of the thread's owner and both).
NAMED = {"bench-dora": "Dora Quillfeather", "bench-eve": "Eve Marrowind"}
naming = False


def entry_body(client: int, index: int) -> dict[str, Any]:
    said = f"{' and '.join(NAMED.values())} join us. " if naming else ""
    return {
        "role": "user" if index % 2 == 0 else "assistant",
        "content": f"[{client}.{index}] {said}{SENTENCES[index % len(SENTENCES)]}",
    }


def run_phase(
    name: str,
    clients: list[Client],
    work: Callable[[int, Client], list[tuple[float, int, int]]],
    web: list[int] | None = None,
) -> Phase:
    """Run `work(number, client)` on every client at once; each returns (seconds, status, entries).
    `web`: the web processes' pids, whose CPU time the phase reads before and after."""
    phase = Phase(name)
    start = threading.Barrier(len(clients) + 1)

    def worker(number: int) -> list[tuple[float, int, int]]:
        start.wait()
        return work(number, clients[number])

    with ThreadPoolExecutor(len(clients)) as pool:
        futures = [pool.submit(worker, n) for n in range(len(clients))]
        cpu_before = cpu_seconds(web) if web else None
        start.wait()
        began = time.perf_counter()
        results = [f.result() for f in futures]
        phase.seconds = time.perf_counter() - began
        if cpu_before is not None and web:
            phase.web_cpu = cpu_seconds(web) - cpu_before
    for rows in results:
        for seconds, status, entries in rows:
            phase.requests += 1
            phase.latencies.append(seconds)
            if status in (200, 201):
                phase.entries += entries
            else:
                phase.errors[status] = phase.errors.get(status, 0) + 1
    return phase


def timed(client: Client, method: str, path: str, body: Any) -> tuple[float, int, Any]:
    began = time.perf_counter()
    status, payload = client.call(method, path, body)
    return time.perf_counter() - began, status, payload


def create_thread(client: Client, thread_id: str) -> None:
    status, payload = client.call("POST", "/api/v1/threads", {"id": thread_id, "metadata": {"bench": True}})
    if status not in (200, 201):
        sys.exit(f"cannot create thread {thread_id}: {status} {payload}")


# --- the web processes' CPU --------------------------------------------------------------------


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    return text[text.rindex(")") + 2 :].split()


def web_processes(port: int) -> list[int]:
    """The gunicorn master bound to `port` on this machine and its workers (pids; none elsewhere)."""
    masters = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = Path(f"/proc/{entry.name}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any("gunicorn" in part for part in line) and any(part.endswith(f":{port}") for part in line):
            masters.append(int(entry.name))
    pids = set(masters)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := proc_stat(int(entry.name))) is not None and int(stat[1]) in masters:
            pids.add(int(entry.name))
    return sorted(pids)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (fields 14 and 15 of /proc/<pid>/stat)."""
    total = 0
    for pid in pids:
        stat = proc_stat(pid)
        if stat is not None:
            total += int(stat[11]) + int(stat[12])
    return total / CLOCK_TICKS


# --- raw baseline ------------------------------------------------------------------------------


def default_database_url() -> str:
    """The service's own database: read from its Django settings (which start nothing new)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
    # Configured just above: the HTTP benchmark itself runs without Django.
    from django.conf import settings

    return str(settings.DATABASE_URL)


INSERT_SQL = (
    "INSERT INTO memoryapp_entry (id, agent_id, thread_id, parent_id, seq, type, role, content, text, tool_calls,"
    " tool_call_id, tool_name, sender_name, token_count, event, metadata, created_at, content_hash)"
    " VALUES (%s, %s, %s, %s, %s, 'message', %s, %s, %s, NULL, '', '', '', %s, NULL, '{}', %s, %s)"
)
COPY_SQL = (
    "COPY memoryapp_entry (id, agent_id, thread_id, parent_id, seq, type, role, content, text, tool_calls,"
    " tool_call_id, tool_name, sender_name, token_count, event, metadata, created_at, content_hash) FROM STDIN"
)


def raw_rows(agent_id: int, thread_pk: int, client: int, count: int, first_seq: int) -> list[tuple[Any, ...]]:
    """The rows an append would write, chained one after another, with fresh ids."""
    rows: list[tuple[Any, ...]] = []
    parent: str | None = None
    now = datetime.now(UTC)
    for index in range(count):
        body = entry_body(client, index)
        entry_id = f"ent_bench{uuid.uuid4().hex[:20]}"
        rows.append(
            (
                entry_id,
                agent_id,
                thread_pk,
                parent,
                first_seq + index,
                body["role"],
                json.dumps(body["content"]),
                body["content"],
                len(body["content"]) // 4 + 4,
                now,
                uuid.uuid4().hex,
            )
        )
        parent = entry_id
    return rows


def run_baseline(
    *,
    url: str,
    agent_id: int,
    thread_pks: list[int],
    per_client: int,
    per_transaction: int,
    method: str,
    seq_base: int,
) -> Phase:
    """Insert `per_client` rows per connection (one connection per client thread), in
    transactions of `per_transaction` rows, all connections at once."""

    name = f"raw psycopg {method}, {per_transaction}/tx"
    phase = Phase(name)
    connections = [psycopg.connect(url) for _ in thread_pks]
    batches = [raw_rows(agent_id, pk, n, per_client, seq_base + n * per_client) for n, pk in enumerate(thread_pks)]
    start = threading.Barrier(len(thread_pks) + 1)

    def worker(number: int) -> list[float]:
        connection, rows = connections[number], batches[number]
        latencies: list[float] = []
        start.wait()
        for offset in range(0, len(rows), per_transaction):
            chunk = rows[offset : offset + per_transaction]
            began = time.perf_counter()
            with connection.transaction(), connection.cursor() as cursor:
                if method == "copy":
                    with cursor.copy(COPY_SQL) as copy:
                        for row in chunk:
                            eid, aid, tid, parent, seq, role, content, text, tokens, at, digest = row
                            copy.write_row(
                                [
                                    eid,
                                    aid,
                                    tid,
                                    parent,
                                    seq,
                                    "message",
                                    role,
                                    content,
                                    text,
                                    None,
                                    "",
                                    "",
                                    "",
                                    tokens,
                                    None,
                                    "{}",
                                    at,
                                    digest,
                                ]
                            )
                else:
                    cursor.executemany(INSERT_SQL, chunk)
            latencies.append(time.perf_counter() - began)
        return latencies

    with ThreadPoolExecutor(len(thread_pks)) as pool:
        futures = [pool.submit(worker, n) for n in range(len(thread_pks))]
        start.wait()
        began = time.perf_counter()
        results = [f.result() for f in futures]
        phase.seconds = time.perf_counter() - began
    for latencies in results:
        phase.latencies += latencies
    phase.entries = per_client * len(thread_pks)
    for connection in connections:
        connection.close()
    return phase


def thread_keys(url: str, external_ids: list[str]) -> tuple[int, list[int]]:

    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT agent_id, id FROM memoryapp_thread WHERE external_id = ANY(%s) ORDER BY external_id",
            [external_ids],
        ).fetchall()
    if len(rows) != len(external_ids):
        sys.exit("the bench threads are not in that database: is --database-url the service's?")
    return int(rows[0][0]), [int(r[1]) for r in rows]


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the service's URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an agent's API key")
    parser.add_argument(
        "--database-url",
        default=None,
        help="the service's database, a URL or libpq conninfo (default: from its settings)",
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    parser.add_argument("--entries", type=int, default=200, help="single appends per client and phase (default 200)")
    parser.add_argument("--batches", type=int, default=10, help="batch requests per client (default 10)")
    parser.add_argument("--batch-size", type=int, default=100, help="entries per batch request (default 100)")
    parser.add_argument("--baseline", choices=["executemany", "copy"], default="executemany")
    parser.add_argument("--keep", action="store_true", help="keep the bench threads")
    parser.add_argument(
        "--naming", action="store_true", help="register two people and name both in every turn (mixed-person rows)"
    )
    args = parser.parse_args(argv)
    global naming
    naming = args.naming

    run = uuid.uuid4().hex[:8]
    clients = [Client(args.base, args.key) for _ in range(args.clients)]
    own = [f"bench-{run}-own-{n:02d}" for n in range(args.clients)]
    shared = f"bench-{run}-shared"
    alone = f"bench-{run}-alone"
    batch_threads = [f"bench-{run}-batch-{n:02d}" for n in range(args.clients)]
    raw_threads = [f"bench-{run}-raw-{n:02d}" for n in range(args.clients)]
    for thread_id in [alone, *own, shared, *batch_threads, *raw_threads]:
        create_thread(clients[0], thread_id)
    if naming:
        for person, name in NAMED.items():
            status, _ = clients[0].call("PUT", f"/api/v1/users/{person}/identifiers", {"names": [name]})
            if status != 200:
                sys.exit(f"registering {person}: {status}")

    def singles(target: Callable[[int], str]) -> Callable[[int, Client], list[tuple[float, int, int]]]:
        def work(number: int, client: Client) -> list[tuple[float, int, int]]:
            out = []
            for index in range(args.entries):
                path = f"/api/v1/threads/{target(number)}/entries"
                seconds, status, _ = timed(client, "POST", path, entry_body(number, index))
                out.append((seconds, status, 1))
            return out

        return work

    def batches(number: int, client: Client) -> list[tuple[float, int, int]]:
        out = []
        for batch in range(args.batches):
            body = {"entries": [entry_body(number, batch * args.batch_size + i) for i in range(args.batch_size)]}
            seconds, status, _ = timed(client, "POST", f"/api/v1/threads/{batch_threads[number]}/entries", body)
            out.append((seconds, status, args.batch_size))
        return out

    def healthz(number: int, client: Client) -> list[tuple[float, int, int]]:
        return [(*timed(client, "GET", "/healthz", None)[:2], 0) for _ in range(args.entries)]

    web = web_processes(urlsplit(args.base).port or 80)
    print(f"{args.clients} clients against {args.base}; run {run}{'; every turn names two people' if naming else ''}")
    if not web:
        print("(no gunicorn bound to that port on this machine: no web CPU figures)")
    solo = run_phase("single appends, one client alone", clients[:1], singles(lambda n: alone), web)
    base = run_phase("/healthz (baseline of web CPU)", clients, healthz, web)
    print(solo.line(base))
    print(base.line(base))
    phases = [
        run_phase("single appends, own threads", clients, singles(lambda n: own[n]), web),
        run_phase("single appends, one shared thread", clients, singles(lambda n: shared), web),
        run_phase(f"batch appends ({args.batch_size}/request)", clients, batches, web),
    ]
    for phase in phases:
        print(phase.line(base))
    if phases[2].web_cpu is not None and phases[2].entries:
        print(f"batch appends: web CPU {phases[2].web_cpu / phases[2].entries * 1000:.3f} ms an entry")

    url = args.database_url or default_database_url()
    agent_id, raw_pks = thread_keys(url, raw_threads)
    raw_batch = run_baseline(
        url=url,
        agent_id=agent_id,
        thread_pks=raw_pks,
        per_client=args.batches * args.batch_size,
        per_transaction=args.batch_size,
        method=args.baseline,
        seq_base=10_000_000,
    )
    raw_single = run_baseline(
        url=url,
        agent_id=agent_id,
        thread_pks=raw_pks,
        per_client=args.entries,
        per_transaction=1,
        method="executemany",
        seq_base=20_000_000,
    )
    raw_single.name = "raw psycopg single-row transactions"
    print(raw_batch.line())
    print(raw_single.line())
    print(
        f"batch appends / raw batch inserts = {phases[2].rate / raw_batch.rate:.0%}   "
        f"single appends (own threads) / raw single-row inserts = {phases[0].rate / raw_single.rate:.0%}"
    )
    print(
        f"single append p50: {solo.percentile(50) * 1000:.2f} ms alone, "
        f"{phases[0].percentile(50) * 1000:.2f} ms with {args.clients} clients at once"
    )
    counts = [phases[0].entries, phases[1].entries, phases[2].entries]
    status, path = clients[0].call("GET", f"/api/v1/threads/{shared}/path?limit=1")
    last_seq = path["results"][-1]["seq"] if status == 200 and path and path.get("results") else None
    print(f"check: shared thread's last seq {last_seq} (expected {args.clients * args.entries}); entries ok {counts}")

    if not args.keep:
        for thread_id in [alone, *own, shared, *batch_threads, *raw_threads]:
            clients[0].call("DELETE", f"/api/v1/threads/{thread_id}")
    for client in clients:
        client.close()


if __name__ == "__main__":
    main()
