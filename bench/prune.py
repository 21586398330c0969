"""The retention prune at size: its speed against a raw DELETE of the same rows, and whether it
stalls the writers of the web API while it runs.

Makes a database of its own, `bench_prune`, on the embedded PostgreSQL under var/ (or on the server
of DATABASE_URL), dropped first if it exists, and migrates it:

1. 100 agents and `--scale` x 1,000,000 entries in threads of `--per-thread` entries (COPY, the
   way the write path inserts batches); a third of the threads were last written 40 days ago, the
   others today. The default policy deletes threads after 30 days.
2. Baseline: the web API (gunicorn, gthread, as `make run` serves it) answers `--appends` single
   appends to a live thread: p50 / p95.
3. The prune, `manage.py prune` in a process of its own (a real job run: batches of PRUNE_BATCH
   threads, each a transaction, through the delete-thread cascade), while the same client keeps
   appending: prune time (its job run's start to finish), rows/s (threads + entries deleted), and
   the appends' p50 / p95 meanwhile.
4. The same rows (the expired threads, written again) deleted by one raw `DELETE` per table in one
   transaction: time, rows/s, and the prune's time as a multiple of it.

    python bench/prune.py [--scale 0.1] [--per-thread 100] [--appends 200]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["LLM_PROVIDER"] = "none"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"

DATABASE = "bench_prune"
AGENTS = 100
EXPIRED_DAYS = 40
TTL_DAYS = 30


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _database_url() -> str:
    """The bench's own database, made anew (on DATABASE_URL's server, or the embedded one)."""
    import psycopg

    given = os.environ.get("DATABASE_URL")
    if given:
        admin = _with_database(given, "postgres")
        url = _with_database(given, DATABASE)
    else:
        from memory_project import embedded

        var_dir = Path(os.environ.get("VAR_DIR", ROOT / "var"))
        admin = embedded.postgres_url(Path(os.environ.get("EMBEDDED_PGDATA", var_dir / "pgdata")))
        url = _with_database(admin, DATABASE)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return url


os.environ["DATABASE_URL"] = _database_url()
os.environ["DB_CONN_MAX_AGE"] = "0"

import django  # noqa: E402

django.setup()

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from governance.models import JobRun  # noqa: E402
from governance.retention.services import PRUNE_JOB_KIND  # noqa: E402
from memoryapp.agents.services import agent_get_or_create, agent_key_create  # noqa: E402
from memoryapp.models import RetentionPolicy, Thread  # noqa: E402
from memoryapp.threads.columns import ENTRY_INSERT_COLUMNS, ENTRY_TABLE  # noqa: E402
from memoryapp.threads.services import thread_create  # noqa: E402

SENTENCES = (
    "Could you plan a day in Rome for us, starting early and avoiding the big queues?",
    "Start at the Colosseum at eight, then walk over the Palatine Hill to the Forum.",
    "We are vegetarian, and my daughter does not like long walks in the afternoon heat.",
    "Then lunch near Campo de' Fiori, a siesta, and the Pantheon after five o'clock.",
)


def conninfo() -> str:
    return str(os.environ["DATABASE_URL"])


# --- the sample ------------------------------------------------------------------------------------


def seed_threads(agent_ids: list[int], names: list[tuple[int, str]], *, per_thread: int, days_ago: float) -> list[int]:
    """Threads (agent index, external id), each of `per_thread` entries in one chain, last written
    `days_ago`; returns their pks. COPY for the entries, as the write path's batches."""
    at = datetime.now(UTC) - timedelta(days=days_ago)
    with psycopg.connect(conninfo()) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY memoryapp_thread (agent_id, external_id, user_id, metadata, next_seq, branch_epoch, extraction,"
            " memory_enabled, on_busy, compaction, created_at, updated_at) FROM STDIN"
        ) as copy:
            for agent_index, name in names:
                row = [agent_ids[agent_index], name, f"u-{name}", Jsonb({}), per_thread + 1, 0, Jsonb({}), True, ""]
                copy.write_row([*row, Jsonb({}), at, at])
        cur.execute(
            "SELECT id, agent_id FROM memoryapp_thread WHERE external_id = ANY(%s) ORDER BY id", [[n for _, n in names]]
        )
        threads = cur.fetchall()
        leaves: list[tuple[str, int]] = []
        statement = f"COPY {ENTRY_TABLE} ({', '.join(ENTRY_INSERT_COLUMNS)}) FROM STDIN"
        with cur.copy(statement) as copy:
            for thread_pk, agent_id in threads:
                parent = None
                for seq in range(1, per_thread + 1):
                    entry_id = f"ent_b{thread_pk:07d}{seq:05d}"
                    text = SENTENCES[seq % len(SENTENCES)]
                    values = {
                        "id": entry_id,
                        "agent_id": agent_id,
                        "thread_id": thread_pk,
                        "parent_id": parent,
                        "seq": seq,
                        "type": "message",
                        "role": "user" if seq % 2 else "assistant",
                        "content": Jsonb(text),
                        "text": text,
                        "tool_calls": None,
                        "tool_call_id": "",
                        "tool_name": "",
                        "sender_name": "",
                        "token_count": 20,
                        "event": None,
                        "metadata": Jsonb({}),
                        "created_at": at,
                        "content_hash": uuid.uuid4().hex,
                        "keyword_hashes": None,
                    }
                    copy.write_row([values[c] for c in ENTRY_INSERT_COLUMNS])
                    parent = entry_id
                leaves.append((parent or "", thread_pk))
        cur.executemany("UPDATE memoryapp_thread SET active_leaf_id = %s WHERE id = %s", leaves)
        conn.commit()
    return [pk for pk, _ in threads]


# --- the web API -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gunicorn", "memory_project.wsgi:application", "--bind", f"127.0.0.1:{port}"]
    command += ["--worker-class", "gthread", "--threads", "4", "--workers", "1", "--timeout", "120"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=os.environ.copy(), stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


class Client:
    def __init__(self, port: int, key: str):
        self.port, self.key = port, key
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def append(self, thread: str, n: int) -> float:
        body = json.dumps({"role": "user", "content": f"turn {n} " + SENTENCES[n % len(SENTENCES)]})
        headers = {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"}
        started = time.perf_counter()
        self.connection.request("POST", f"/api/v1/threads/{thread}/entries", body=body, headers=headers)
        response = self.connection.getresponse()
        raw = response.read()
        took = time.perf_counter() - started
        if response.status != 201:
            raise RuntimeError(f"append answered {response.status}: {raw[:300]!r}")
        return took


def pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def ms(values: list[float]) -> str:
    return (
        f"p50 {pct(values, 50) * 1000:7.1f} ms  p95 {pct(values, 95) * 1000:7.1f} ms"
        f"  max {max(values) * 1000:7.1f} ms  ({len(values)} appends)"
    )


# --- the run ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.1, help="1.0 = 1,000,000 entries")
    parser.add_argument("--per-thread", type=int, default=100)
    parser.add_argument("--appends", type=int, default=200)
    options = parser.parse_args()
    entries = int(1_000_000 * options.scale)
    threads = max(AGENTS, entries // options.per_thread)
    expired = threads // 3

    print(f"database {DATABASE}: migrating", flush=True)
    call_command("migrate", verbosity=0)
    agents = [agent_get_or_create(slug=f"bench-{n:03d}")[0] for n in range(AGENTS)]
    agent_ids = [a.pk for a in agents]
    names = [(n % AGENTS, f"t-{n:07d}") for n in range(threads)]
    doomed_names, live_names = names[:expired], names[expired:]
    started = time.perf_counter()
    seed_threads(agent_ids, live_names, per_thread=options.per_thread, days_ago=0)
    doomed = seed_threads(agent_ids, doomed_names, per_thread=options.per_thread, days_ago=EXPIRED_DAYS)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    seeded = time.perf_counter() - started
    total_entries = threads * options.per_thread
    doomed_entries = len(doomed) * options.per_thread
    print(
        f"seeded {AGENTS} agents, {threads:,} threads, {total_entries:,} entries in {seeded:.0f} s; "
        f"past the TTL: {len(doomed):,} threads, {doomed_entries:,} entries",
        flush=True,
    )
    RetentionPolicy.objects.create(thread_ttl_days=TTL_DAYS)
    writer = thread_create(agent=agents[0], external_id="bench-live-writer")
    _, key = agent_key_create(agent=agents[0], name="bench")
    connection.close()

    port = free_port()
    log = ROOT / "bench" / "out" / "prune-gunicorn.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    server = serve(port, log)
    try:
        client = Client(port, key)
        for n in range(20):  # warm up the worker and its connections
            client.append(writer.external_id, n)
        alone = [client.append(writer.external_id, 100 + n) for n in range(options.appends)]
        print(f"appends, nothing else running:  {ms(alone)}", flush=True)

        prune = subprocess.Popen(
            [sys.executable, "manage.py", "prune"],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        stamped: list[tuple[datetime, float]] = []
        n = 10_000
        while prune.poll() is None:
            took = client.append(writer.external_id, n)
            stamped.append((datetime.now(UTC), took))
            n += 1
        output = prune.stdout.read().decode() if prune.stdout else ""
        if prune.returncode != 0:
            raise RuntimeError(f"manage.py prune failed:\n{output[-3000:]}")
        # Only the appends while the job ran (not the command's start-up) count as "during".
        run = JobRun.objects.filter(kind=PRUNE_JOB_KIND).order_by("-pk").first()
        assert run is not None and run.started_at and run.finished_at
        prune_seconds = (run.finished_at - run.started_at).total_seconds()
        counts: dict[str, Any] = run.result["counts"]
        during = [
            took for at, took in stamped if run.started_at <= at - timedelta(seconds=took) and at <= run.finished_at
        ]
        print(f"appends while the prune ran:    {ms(during)}", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)

    deleted_rows = counts["threads_deleted"] + counts["thread_entries_deleted"]
    assert counts["threads_deleted"] == len(doomed), counts
    assert not Thread.objects.filter(pk__in=doomed).exists()

    # The same rows again, deleted raw.
    again = seed_threads(agent_ids, doomed_names, per_thread=options.per_thread, days_ago=EXPIRED_DAYS)
    with psycopg.connect(conninfo()) as conn, conn.cursor() as cur:
        cur.execute("ANALYZE")
        conn.commit()
        started = time.perf_counter()
        cur.execute(f"DELETE FROM {ENTRY_TABLE} WHERE thread_id = ANY(%s)", [again])
        raw_entries = cur.rowcount
        cur.execute("DELETE FROM memoryapp_thread WHERE id = ANY(%s)", [again])
        raw_threads = cur.rowcount
        conn.commit()
        raw_seconds = time.perf_counter() - started
    raw_rows = raw_entries + raw_threads

    print()
    print(f"scale {options.scale} ({total_entries:,} entries, {AGENTS} agents, a third past the TTL)")
    print(f"prune (manage.py prune, batches of {os.environ.get('PRUNE_BATCH', '200')} threads, delete-thread cascade):")
    print(
        f"  {counts['threads_deleted']:,} threads + {counts['thread_entries_deleted']:,} entries in {prune_seconds:.1f} s"
        f" = {deleted_rows / prune_seconds:,.0f} rows/s ({counts['threads_deleted'] / prune_seconds:,.1f} threads/s)"
    )
    print(
        f"raw DELETE of the same rows, one transaction: {raw_threads:,} threads + {raw_entries:,} entries in"
        f" {raw_seconds:.2f} s = {raw_rows / raw_seconds:,.0f} rows/s"
    )
    print(f"prune time / raw DELETE time: {prune_seconds / raw_seconds:.1f}x")
    print(
        f"web API append p50 without the prune {pct(alone, 50) * 1000:.1f} ms, while it ran {pct(during, 50) * 1000:.1f} ms"
        f" ({pct(during, 50) / pct(alone, 50):.2f}x); p95 {pct(alone, 95) * 1000:.1f} -> {pct(during, 95) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
