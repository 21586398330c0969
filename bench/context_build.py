"""Bench: context builds and hybrid search on a 10,000-entry thread in a 60,000-entry scope.

    python bench/context_build.py [--thread-entries 10000] [--other-entries 50000] [--runs 40]

Creates its own agent (deleted afterwards) with one thread of N entries and M other entries in
other threads of the same agent, vectors written directly by the configured embedder (the fake
one by default here: set EMBEDDER=local to bench the real model's query embedding), then prints
p50 / p95 of:
  - context builds per strategy (recent, relevant, hybrid), max_tokens 8000;
  - hybrid search (limit 10) server-side, the query's embedding time shown apart; within the
    thread both with the question's embedding cached (asked again) and paid (a fresh question);
and, measured in the same run as baselines: a keyword-only search, and a raw SQL fetch of the
thread's newest 200 entries. It never asserts a duration and never stops a server.

Within the thread, hybrid and vector-only search are measured twice in the same rounds: reading the
thread's nearest rows by their vectors' sign bits and then the best candidates by their vectors
(the default, migration 0063), and by every vector of the thread (`vector.QUANTIZED_READ` off); the
share of questions whose top 10 both reads agree on is printed. --quantize-thread first gives the
thread's rows of a database kept from before migration 0063 their bits (`vectors_quantize`), then
VACUUM ANALYZE.

With --inline-after (on a kept database: --reuse, or --database for a copy of one) it then moves
the thread's vectors kept in TOAST into their rows (`vectors_inline`, migration 0053) and measures
again in the same run.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ.setdefault("EMBEDDER", "fake")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The bench writes rows directly: no job may be sent to a broker a running service listens to.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

DATABASE = "bench_context"


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _server_url() -> str:
    """The maintenance database of DATABASE_URL's server, or of the embedded one under var/."""
    given = os.environ.get("DATABASE_URL")
    if given:
        return _with_database(given, "postgres")
    from memory_project import embedded

    var_dir = Path(os.environ.get("VAR_DIR", ROOT / "var"))
    return embedded.postgres_url(Path(os.environ.get("EMBEDDED_PGDATA", var_dir / "pgdata")))


def _database_url(*, fresh: bool) -> str:
    """The bench's own database (made anew unless `fresh` is False and it exists)."""
    import psycopg

    admin = _server_url()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
        if fresh or not exists:
            conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
    return _with_database(admin, DATABASE)


def _database_drop() -> None:
    import psycopg

    with psycopg.connect(_server_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


ARGS: argparse.Namespace | None = None
if __name__ == "__main__":
    _parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _parser.add_argument("--thread-entries", type=int, default=10_000)
    _parser.add_argument("--other-entries", type=int, default=50_000)
    _parser.add_argument("--runs", type=int, default=40)
    _parser.add_argument("--max-tokens", type=int, default=8000)
    _parser.add_argument(
        "--keep", action="store_true", help="keep the database (bench_context_<thread>_<other>) afterwards"
    )
    _parser.add_argument(
        "--reuse", action="store_true", help="measure again the data a --keep run of the same sizes left"
    )
    _parser.add_argument(
        "--database", help="with --reuse: measure this database (e.g. a copy of a kept one) instead of the size's own"
    )
    _parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="leave the setup's objects to the collector (before issue 26's build round, the bench did)",
    )
    _parser.add_argument(
        "--inline-after",
        action="store_true",
        help="then move the thread's vectors kept in TOAST into their rows (`vectors_inline`) and measure again",
    )
    _parser.add_argument(
        "--quantize-thread",
        action="store_true",
        help="first fill the sign bits of the thread's rows (a database kept from before migration 0063), then vacuum",
    )
    ARGS = _parser.parse_args()
    # One database per size, so that both sizes can be kept and measured again.
    DATABASE = ARGS.database or f"bench_context_{ARGS.thread_entries}_{ARGS.other_entries}"
    os.environ["DATABASE_URL"] = _database_url(fresh=not ARGS.reuse)

import django  # noqa: E402
import numpy  # noqa: E402
import psycopg  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from memoryapp.agents.services import agent_get_or_create  # noqa: E402
from memoryapp.context.builder import ContextRequest, context_build  # noqa: E402
from memoryapp.models import Agent, Entry, Thread  # noqa: E402
from memoryapp.search import vector as vector_channel  # noqa: E402
from memoryapp.search.embedders import (  # noqa: E402
    FakeEmbedder,
    _word_stem,
    embed_query,
    embed_texts,
    embedder,
    query_cache_clear,
)
from memoryapp.search.indexing import embed_pending  # noqa: E402
from memoryapp.search.retrieval import search  # noqa: E402
from memoryapp.search.scope import EntryScope  # noqa: E402
from memoryapp.search.space import vectors_inline, vectors_quantize  # noqa: E402
from memoryapp.threads.services import entries_add, thread_create  # noqa: E402
from memoryapp.threads.validation import MAX_BATCH_ENTRIES  # noqa: E402

TOPICS = (
    "garden tomatoes watering soil compost seeds harvest basil roses tulips",
    "marathon training running shoes knee pace interval tempo race medal",
    "guitar chords practice band concert song melody lyrics amplifier",
    "mortgage bank interest rate savings budget loan payment account",
    "vacation flight hotel beach passport luggage island museum tickets",
    "puppy dog walk vet leash treats training park fetch retriever",
    "recipe pasta sauce garlic oven baking bread flour dinner kitchen",
    "project deadline meeting manager report slides client review",
    "painting canvas colours sunset brush gallery sketch watercolor",
    "doctor appointment medicine allergy headache sleep exercise diet",
)
FILLER = [
    "really",
    "think",
    "maybe",
    "today",
    "yesterday",
    "week",
    "friend",
    "family",
    "home",
    "work",
    "always",
    "never",
    "little",
    "great",
]
QUERIES = (
    "How is the marathon training going with the knee?",
    "What did we say about the mortgage interest rate?",
    "Which recipe for pasta sauce with garlic?",
    "When is the flight to the island and the hotel?",
    "What did the vet say about the puppy?",
    "Tell me about the painting of the sunset at the gallery",
    "Did the doctor change the allergy medicine?",
    "What was the project deadline for the client report?",
)


def sentence(rng: random.Random, topic: int) -> str:
    words = TOPICS[topic].split()
    picked = rng.sample(words, 4) + rng.sample(FILLER, 5)
    rng.shuffle(picked)
    return "I " + " ".join(picked) + "."


def write_thread(*, agent: Agent, count: int, rng: random.Random, start: datetime) -> Thread:
    """The measured thread, through the service's own write path: batches of `entries_add` (as an
    import or a batch append writes them), then the embedding job's service."""
    thread = thread_create(agent=agent, external_id="bench-main", user_id="u-bench")
    specs = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": sentence(rng, rng.randrange(len(TOPICS))),
            "created_at": start + timedelta(seconds=30 * i),
        }
        for i in range(count)
    ]
    for offset in range(0, count, MAX_BATCH_ENTRIES):
        entries_add(thread=thread, entries=specs[offset : offset + MAX_BATCH_ENTRIES])
    embed_pending(agent_id=agent.pk)
    thread.refresh_from_db()
    return thread


class OtherVectors:
    """Vectors of the other data's texts, made fast. With the fake embedder (the default) a text's
    vector is the normalised sum of its words' shares of the embedder's buckets: exactly what the
    embedder gives, computed with numpy. With another embedder, the texts come from a pool of
    POOL distinct sentences embedded once (each row then shares its text and vector with others)."""

    POOL = 4096

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        found = embedder()
        self.fake = found if isinstance(found, FakeEmbedder) else None
        vocabulary = sorted({w for topic in TOPICS for w in topic.split()} | set(FILLER) | {"i"})
        self.index = {w: n for n, w in enumerate(vocabulary)}
        if self.fake is not None:
            shares = numpy.zeros((len(vocabulary), self.fake.dimensions), dtype=numpy.float32)
            for word, n in self.index.items():
                stem = _word_stem(word)
                bucket, sign = self.fake._bucket("w:" + stem)
                shares[n, bucket] += 2.0 * sign
                padded = f"#{stem}#"
                for i in range(len(padded) - 2):
                    bucket, sign = self.fake._bucket("t:" + padded[i : i + 3])
                    shares[n, bucket] += 0.5 * sign
            self.shares = shares
        else:
            self.pool = [sentence(rng, rng.randrange(len(TOPICS))) for _ in range(self.POOL)]
            self.pool_vectors = numpy.asarray(embed_texts(self.pool), dtype=numpy.float32)

    def rows(self, count: int) -> tuple[list[str], Any]:
        """`count` texts and their vectors (a float32 matrix, one row each)."""
        if self.fake is None:
            picks = [self.rng.randrange(self.POOL) for _ in range(count)]
            return [self.pool[p] for p in picks], self.pool_vectors[picks]
        texts = [sentence(self.rng, self.rng.randrange(len(TOPICS))) for _ in range(count)]
        words = numpy.asarray([[self.index[w] for w in text[:-1].lower().split()] for text in texts])
        vectors = self.shares[words].sum(axis=1)
        vectors /= numpy.linalg.norm(vectors, axis=1, keepdims=True)
        return texts, vectors


BENCH_AGENT = "bench-context"
# Indexes of entries built once after the other data's COPY rather than row by row during it (an
# HNSW insert costs ~3 ms here; the bulk build of the same index a fraction of that per row).
BULK_BUILT_INDEXES = ("entry_embedding_hnsw", "entry_search_thread_gin", "entry_thread_vectors_idx")

ENTRY_COLUMNS = (
    "id, seq, type, role, content, text, tool_call_id, tool_name, sender_name, token_count, metadata,"
    " created_at, content_hash, embedding, embedded_at, agent_id, parent_id, thread_id"
)
ENTRY_TYPES = [
    "varchar",
    "int8",
    "varchar",
    "varchar",
    "jsonb",
    "text",
    "varchar",
    "varchar",
    "varchar",
    "int4",
    "jsonb",
    "timestamptz",
    "varchar",
    "vector",
    "timestamptz",
    "int8",
    "varchar",
    "int8",
]


def write_other(*, agent: Agent, count: int, rng: random.Random, start: datetime, per_thread: int = 1000) -> None:
    """The agent's other data, straight into PostgreSQL (not the API's write path: it is the
    background the measured thread is searched against): its threads by the ORM, their entries by
    one binary COPY per thread, vectors made by `OtherVectors`."""
    if count <= 0:
        return
    threads = Thread.objects.bulk_create(
        [
            Thread(agent=agent, external_id=f"bench-{n}", user_id=f"u-{n % 7}", next_seq=per_thread + 1)
            for n in range(count // per_thread)
        ],
        batch_size=1000,
    )
    vectors = OtherVectors(rng)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    started = time.perf_counter()
    with psycopg.connect(**params, autocommit=True) as raw:
        register_vector(raw)
        # The bench's own database: its big indexes are dropped for the COPY and built again after.
        definitions = raw.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memoryapp_entry' AND indexname = ANY(%s)",
            [list(BULK_BUILT_INDEXES)],
        ).fetchall()
        for name, _ in definitions:
            raw.execute(f'DROP INDEX "{name}"')
        for done, thread in enumerate(threads, start=1):
            texts, matrix = vectors.rows(per_thread)
            ids = [f"ent_b{uuid.uuid4().hex[:30]}" for _ in texts]
            with (
                raw.cursor() as cursor,
                cursor.copy(f"COPY memoryapp_entry ({ENTRY_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(ENTRY_TYPES)
                for i, text in enumerate(texts):
                    copy.write_row(
                        (
                            ids[i],
                            i + 1,
                            "message",
                            "user" if i % 2 == 0 else "assistant",
                            Jsonb(text),
                            text,
                            "",
                            "",
                            "",
                            len(text) // 4 + 4,
                            Jsonb({}),
                            start + timedelta(seconds=30 * i),
                            uuid.uuid4().hex,
                            matrix[i],
                            start,
                            agent.pk,
                            ids[i - 1] if i else None,
                            thread.pk,
                        )
                    )
            raw.execute("UPDATE memoryapp_thread SET active_leaf_id = %s WHERE id = %s", [ids[-1], thread.pk])
            if done % 50 == 0 or done == len(threads):
                elapsed = time.perf_counter() - started
                print(f"  other data: {done * per_thread} entries in {elapsed:.0f} s", flush=True)
        raw.execute("SET maintenance_work_mem = '2GB'")
        for name, definition in definitions:
            begun = time.perf_counter()
            raw.execute(definition)
            print(f"  index {name} built in {time.perf_counter() - begun:.0f} s", flush=True)


def populate(agent: Agent, *, thread_entries: int, other_entries: int) -> Thread:
    rng = random.Random(7)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    started = time.perf_counter()
    write_other(agent=agent, count=other_entries, rng=rng, start=start)
    other_s = time.perf_counter() - started
    started = time.perf_counter()
    main = write_thread(agent=agent, count=thread_entries, rng=rng, start=start)
    print(f"  filled: other data {other_s:.0f} s (COPY), the thread {time.perf_counter() - started:.0f} s (service)")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryapp_entry")
        cursor.execute("ANALYZE memoryapp_thread")
    return main


class Clock:
    """Wall time and CPU time of one call: this process's and, when PostgreSQL runs on this machine,
    that of the connection's server process (from /proc, in clock ticks: summed over many calls)."""

    def __init__(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            self.stat = Path(f"/proc/{cursor.fetchone()[0]}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")

    def server_cpu(self) -> float:
        try:
            fields = self.stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick

    def __call__(self, call: Callable[[], Any]) -> tuple[float, float]:
        wall, cpu, server = time.perf_counter(), time.process_time(), self.server_cpu()
        call()
        return (
            (time.perf_counter() - wall) * 1000,
            (time.process_time() - cpu + self.server_cpu() - server) * 1000,
        )


def rounds(runs: int, ops: dict[str, Callable[[int], Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """Each op once per round, in turn (so that every op meets the same load), after one warm-up round:
    each op's wall times and CPU times (ms)."""
    clock = Clock()
    for op in ops.values():
        op(0)  # warm caches and plans
    found: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ops}
    for i in range(runs):
        for name, op in ops.items():
            wall, cpu = clock(functools.partial(op, i))
            found[name][0].append(wall)
            found[name][1].append(cpu)
    return found


def line(label: str, times: list[float], cpu: list[float] | None = None) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    text = f"  {label:<46} p50 {statistics.median(times):7.1f} ms   p95 {p95:7.1f} ms"
    if cpu is not None:
        text += f"   cpu {statistics.fmean(cpu):6.1f} ms"
    return text


def main() -> None:
    args = ARGS
    assert args is not None
    started = time.perf_counter()
    print(f"database {DATABASE}: migrating", flush=True)
    call_command("migrate", verbosity=0)  # a kept database too: the code may have moved on since
    if args.reuse:
        agent = Agent.objects.get(slug=BENCH_AGENT)
        thread = Thread.objects.get(agent=agent, external_id="bench-main")
    else:
        agent, _ = agent_get_or_create(slug=BENCH_AGENT)
        thread = populate(agent, thread_entries=args.thread_entries, other_entries=args.other_entries)
    try:
        total = Entry.objects.filter(agent=agent).count()
        in_thread = Entry.objects.filter(thread=thread).count()
        print(
            f"setup: database {DATABASE}, {total} entries of one agent ({in_thread} in the thread),"
            f" embedder {embedder().name}, {time.perf_counter() - started:.0f} s"
        )
        if args.quantize_thread:
            begun = time.perf_counter()
            filled = vectors_quantize(agent_id=agent.pk, thread_id=thread.pk)
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE memoryapp_entry")
            print(
                f"vectors_quantize: {filled} rows of the thread, {time.perf_counter() - begun:.0f} s (with VACUUM ANALYZE)"
            )
        if not args.no_gc_freeze:
            # As the service's processes freeze what they made at start (gc.freeze in
            # memory_project/gunicorn_config.on_starting and memory_project/celery.py): else every
            # full collection during the rounds walks the setup's objects (~0.6 ms of a hybrid
            # build's CPU here), which a served build does not.
            gc.collect()
            gc.freeze()
        measure(args, agent, thread, total)
        if args.inline_after:
            moved_at = time.perf_counter()
            moved = vectors_inline(thread_id=thread.pk)["memoryapp_entry"]
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE memoryapp_entry")
            print(
                f"vectors_inline: {moved} of the thread's vectors moved into their rows,"
                f" {time.perf_counter() - moved_at:.0f} s (with VACUUM ANALYZE); measured again:"
            )
            measure(args, agent, thread, total)
    finally:
        connection.close()
        if args.keep or args.reuse:
            print(f"kept: database {DATABASE} (measure it again with --reuse)")
        else:
            _database_drop()
            print(f"cleanup: database {DATABASE} dropped")


def measure(args: argparse.Namespace, agent: Agent, thread: Thread, total: int) -> None:
    embed_ms: list[float] = []

    def build(strategy: str) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            return context_build(
                agent=agent,
                thread=thread,
                request=ContextRequest(
                    max_tokens=args.max_tokens,
                    strategy=strategy,
                    system_prompt="You are a helpful assistant.",
                    current_input=QUERIES[i % len(QUERIES)],
                ),
            )

        return run

    def searching(
        method: str, *, in_thread: bool = False, query: int | None = None, fresh: bool = False
    ) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            if method == "hybrid" and (fresh or not in_thread):
                query_cache_clear()  # the query's embedding is paid (and, in the whole scope, told apart)
            outcome = search(
                agent=agent,
                text=QUERIES[(i if query is None else query) % len(QUERIES)],
                thread=thread if in_thread else None,
                limit=10,
                method=method,
            )
            if method == "hybrid" and not in_thread:
                embed_ms.append(outcome.embed_ms)
            return outcome

        return run

    def exact(op: Callable[[int], Any]) -> Callable[[int], Any]:
        def run(i: int) -> Any:
            vector_channel.QUANTIZED_READ = False
            try:
                return op(i)
            finally:
                vector_channel.QUANTIZED_READ = True

        return run

    # The read by the bits is measured whatever the embedder (the fake one's bits tell little apart,
    # and the service reads them only for the models measured: `vector.quantized_read`): its cost is
    # the same, `agreement` says how often it finds the exact rows.
    vector_channel.QUANTIZED_READ = True

    def newest(i: int) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, role, content, tool_calls FROM memoryapp_entry WHERE thread_id = %s "
                "ORDER BY seq DESC LIMIT 200",
                [thread.pk],
            )
            return cursor.fetchall()

    embed_query(QUERIES[0])
    ops: dict[str, Callable[[int], Any]] = {
        "build recent": build("recent"),
        "build relevant": build("relevant"),
        "build hybrid": build("hybrid"),
        "hybrid": searching("hybrid"),
        "hybrid thread": searching("hybrid", in_thread=True),
        "hybrid thread fresh": searching("hybrid", in_thread=True, fresh=True),
        "hybrid thread exact": exact(searching("hybrid", in_thread=True)),
        "vector thread": searching("vector", in_thread=True),
        "vector thread exact": exact(searching("vector", in_thread=True)),
        "keyword": searching("keyword"),
        "keyword thread": searching("keyword", in_thread=True),
        "vector": searching("vector", query=0),
        "raw": newest,
    }
    found = rounds(args.runs, ops)
    embeds = embed_ms[1:]
    found["hybrid"] = ([t - e for t, e in zip(found["hybrid"][0], embeds, strict=True)], found["hybrid"][1])
    in_thread = Entry.objects.filter(thread=thread).count()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_column_toast_chunk_id(embedding)) FROM memoryapp_entry WHERE thread_id = %s", [thread.pk]
        )
        print(f"the thread's vectors kept in TOAST (out of their rows): {cursor.fetchone()[0]} of {in_thread}")
    print(
        f"{args.runs} rounds, each op once a round in turn (cpu: this process + its PostgreSQL backend;"
        f" setup's objects {'left to the collector' if args.no_gc_freeze else 'frozen, as the service does'}):"
    )
    print(f"context builds (max_tokens {args.max_tokens}):")
    for strategy in ("recent", "relevant", "hybrid"):
        built = ops[f"build {strategy}"](0)
        print(
            line(strategy, *found[f"build {strategy}"]) + f"   ({built.included_message_count} messages,"
            f" {len(built.recalled_entries)} recalled)"
        )
    print(f"search, limit 10, in the agent's whole scope ({total} entries) and in the thread ({in_thread}):")
    print(line("hybrid search, without the query embedding", *found["hybrid"]))
    print(line(f"  query embedding ({embedder().name})", embeds))
    # A question asked again finds its embedding in the process's cache (memoryapp.search.embedders):
    # both are shown, the fresh one with its embedding paid.
    print(line("hybrid within the thread, question cached", *found["hybrid thread"]))
    print(line("  the same, a fresh question (embedding paid)", *found["hybrid thread fresh"]))
    print(line("hybrid within the thread, every vector compared", *found["hybrid thread exact"]))
    print(line("vector-only within the thread, by the bits", *found["vector thread"]))
    print(line("vector-only within the thread, every vector", *found["vector thread exact"]))
    print(agreement(agent, thread))
    print("baselines, same rounds:")
    print(line("keyword-only search (same selector)", *found["keyword"]))
    print(line("keyword-only search within the thread", *found["keyword thread"]))
    print(line("vector-only search (query embedded beforehand)", *found["vector"]))
    print(line("raw SQL: the thread's newest 200 entries", *found["raw"]))

    def ratio(a: str, b: str) -> str:
        wall = statistics.median(found[a][0]) / max(statistics.median(found[b][0]), 1e-6)
        cpu = statistics.fmean(found[a][1]) / max(statistics.fmean(found[b][1]), 1e-6)
        return f"{wall:.2f}x (cpu {cpu:.2f}x)"

    print("ratios (p50 wall; mean cpu):")
    print(f"  hybrid / keyword-only search, whole scope     {ratio('hybrid', 'keyword')}")
    print(f"  hybrid / keyword-only search, in the thread   {ratio('hybrid thread', 'keyword thread')}")
    print(f"    the same, a fresh question                  {ratio('hybrid thread fresh', 'keyword thread')}")
    print(f"  hybrid / keyword-only in the thread, exact    {ratio('hybrid thread exact', 'keyword thread')}")
    print(f"  vector-only in the thread, bits / exact       {ratio('vector thread', 'vector thread exact')}")
    print(f"  hybrid context build / raw newest 200 rows    {ratio('build hybrid', 'raw')}")


def agreement(agent: Agent, thread: Thread) -> str:
    """How often the read by the bits (with the search's candidates) and the exact read give the
    thread's same 10 nearest rows, and the share of the exact 10 the bits' read finds."""
    scope = EntryScope(agent_id=agent.pk, thread_pk=thread.pk)
    where, params = scope.where("e")
    exact_sql = (
        f"SELECT e.id FROM memoryapp_entry e WHERE {where} AND e.embedding IS NOT NULL"
        " ORDER BY (e.embedding <=> %(v)s::vector) + 0 LIMIT %(n)s"  # + 0: every row compared, not the walk
    )
    candidates = max(vector_channel.CANDIDATES_MIN, vector_channel.CANDIDATES_PER_ROW * vector_channel.NEAREST_KEPT)
    same = found_share = 0.0
    with connection.cursor() as cursor:
        for text in QUERIES:
            values = {**params, "v": vector_channel.vector_literal(embed_query(text)), "n": 10, "m": candidates}
            cursor.execute(vector_channel._quantized_nearest(scope), values)
            by_bits = {r[0] for r in cursor.fetchall()}
            cursor.execute(exact_sql, values)
            every = {r[0] for r in cursor.fetchall()}
            same += by_bits == every
            found_share += len(by_bits & every) / max(len(every), 1)
    return (
        f"  the top 10 by the bits ({candidates} candidates) = the exact top 10: {same:.0f} of {len(QUERIES)}"
        f" questions, {100 * found_share / len(QUERIES):.0f}% of the exact 10 found ({embedder().name} vectors)"
    )


if __name__ == "__main__":
    main()
