"""Bench: the embedding job's throughput against the model's own, on the same texts, same run.

    python bench/embedding_job.py [--entries 2000] [--rounds 2] [--chunks 64,8]

Creates its own agent (deleted afterwards) with one thread of `--entries` turns without vectors
(long and short turns mixed, as conversations go), then, `--rounds` times in turn:
  - raw: the local model's encoding of exactly the texts the job embeds (its contextual texts,
    memoryapp.search.indexing.entry_embedding_text) as one call (all-MiniLM-L6-v2: batches of 64);
  - job: `embed_pending` for the agent, what the `embedding` queue's task runs (it reads the
    pending turns a batch at a time, embeds them and writes their vectors), after the vectors of
    the round before were cleared.
`--chunks 64,8` also times the raw encode with each number of texts per run of the model (its
`BATCH`), taking turns each round: the model's own chunking, with nothing else changed.
Prints entries/s of each and the job's share of the raw rate (medians of the rounds), by the
clock and by CPU time: the CPU seconds of this process (the model, the job's Python) plus, for the
job, those of its PostgreSQL backend (its queries, the vector index's inserts), read from /proc.
On a machine shared with other work the clock moves with the neighbours' load and the CPU time
does not. The model runs with EMBEDDING_THREADS threads in both, as in a worker. It never asserts
a duration.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ.setdefault("EMBEDDER", "local")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The bench writes rows directly: no job may be sent to a broker a running service listens to.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from memoryapp.agents.services import agent_get_or_create  # noqa: E402
from memoryapp.models import Agent, Entry, Thread  # noqa: E402
from memoryapp.search import embedders, indexing  # noqa: E402

LONG = (
    "We planned the garden this weekend: tomatoes along the south fence, basil and thyme in pots by "
    "the kitchen door, and the compost heap moved behind the shed so it gets less sun in July.",
    "My knee started hurting again after the long run on Sunday, so the physio said to put the "
    "marathon training on hold for two weeks and swim instead, with a check-up on the 14th.",
    "The bank wrote that the mortgage rate goes up in March; before we decide anything we should "
    "compare it with what the savings account earns and ask whether an early repayment is free.",
    "Book the flight to Lisbon for the ninth, the early one, and a hotel near the river rather than "
    "the airport; my sister arrives on the tenth and would like to stay two nights with us.",
)
SHORT = ("Yes, last May!", "Sounds good.", "No, the other one.", "Thanks!", "Which day again?", "Ok, done.")


def populate(agent: Agent, count: int) -> None:
    rng = random.Random(3)
    thread = Thread.objects.create(agent=agent, external_id="bench-embed", user_id="u-bench")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    entries, parent = [], None
    for i in range(count):
        text = rng.choice(SHORT) if rng.random() < 0.3 else f"{rng.choice(LONG)} ({i})"
        entry = Entry(
            agent=agent,
            thread=thread,
            parent_id=parent,
            seq=i + 1,
            type="message",
            role="user" if i % 2 == 0 else "assistant",
            content=text,
            text=text,
            token_count=len(text) // 4 + 4,
            metadata={},
            created_at=start + timedelta(seconds=30 * i),
            content_hash=uuid.uuid4().hex,
        )
        entries.append(entry)
        parent = entry.id
    Entry.objects.bulk_create(entries, batch_size=1000)
    Thread.objects.filter(pk=thread.pk).update(active_leaf_id=parent, next_seq=count + 1)


def backend_cpu() -> float:
    """CPU seconds of this connection's PostgreSQL backend (the embedded server runs here)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def job_texts(agent: Agent) -> list[str]:
    rows = list(Entry.objects.filter(agent=agent).order_by("seq"))
    by_id = {e.id: e for e in rows}
    return [indexing.entry_embedding_text(entry=e, previous=by_id.get(e.parent_id or "")) for e in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--chunks",
        default="",
        help="texts per run of the local model to compare on the raw encode, e.g. 64,8 (taking turns each round)",
    )
    args = parser.parse_args()
    chunks = [int(c) for c in args.chunks.split(",") if c.strip()]

    agent, _ = agent_get_or_create(slug=f"bench-{uuid.uuid4().hex[:10]}")
    try:
        populate(agent, args.entries)
        texts = job_texts(agent)
        model = embedders._load_local_model()
        model.documents(texts[:64])  # warm
        print(
            f"{args.entries} turns, embedder {settings.EMBEDDER}, EMBEDDING_THREADS {settings.EMBEDDING_THREADS},"
            f" EMBEDDING_BATCH_SIZE {settings.EMBEDDING_BATCH_SIZE}"
        )
        raw_rates, job_rates, raw_cpu_rates, job_cpu_rates = [], [], [], []
        for round_ in range(args.rounds):
            began, cpu = time.perf_counter(), time.process_time()
            model.documents(texts)
            raw_rates.append(len(texts) / (time.perf_counter() - began))
            raw_cpu_rates.append(len(texts) / (time.process_time() - cpu))

            Entry.objects.filter(agent=agent).update(embedding=None, embedded_at=None)
            began, cpu, db_cpu = time.perf_counter(), time.process_time(), backend_cpu()
            done = indexing.embed_pending(agent_id=agent.pk)
            job_rates.append(done["entries"] / (time.perf_counter() - began))
            job_cpu_rates.append(done["entries"] / (time.process_time() - cpu + backend_cpu() - db_cpu))
            print(
                f"  round {round_ + 1}: raw encode {raw_rates[-1]:6.1f} entries/s ({raw_cpu_rates[-1]:6.1f} per CPU s)"
                f"   embedding job {job_rates[-1]:6.1f} entries/s ({job_cpu_rates[-1]:6.1f} per CPU s;"
                f" {done['entries']} embedded in {done['batches']} batches)"
            )
        runs = model if isinstance(model, embedders.MiniLMInt8Model) else None
        if chunks and runs is None:
            print(f"  --chunks: {settings.EMBEDDING_MODEL} has no run size of its own to compare")
        elif chunks and runs is not None:
            chunk_cpu_rates: dict[int, list[float]] = {c: [] for c in chunks}
            kept = runs.BATCH
            try:
                for _ in range(args.rounds):
                    for chunk in chunks:
                        runs.BATCH = chunk
                        cpu = time.process_time()
                        runs.documents(texts)
                        chunk_cpu_rates[chunk].append(len(texts) / (time.process_time() - cpu))
            finally:
                runs.BATCH = kept
            first = statistics.median(chunk_cpu_rates[chunks[0]])
            for chunk in chunks:
                rate = statistics.median(chunk_cpu_rates[chunk])
                print(
                    f"  raw encode {chunk:3d} texts a run: {rate:6.1f} entries per CPU s"
                    f" = {rate / first:.2f}x {chunks[0]} a run{' (the model default)' if chunk == kept else ''}"
                )
        raw, job = statistics.median(raw_rates), statistics.median(job_rates)
        raw_cpu, job_cpu = statistics.median(raw_cpu_rates), statistics.median(job_cpu_rates)
        print(f"embedding job {job:.1f} entries/s = {100 * job / raw:.0f}% of raw model encode ({raw:.1f} entries/s)")
        print(
            f"per CPU second: embedding job {job_cpu:.1f} entries = {100 * job_cpu / raw_cpu:.0f}% of raw model"
            f" encode ({raw_cpu:.1f} entries)"
        )
    finally:
        Agent.objects.filter(pk=agent.pk).delete()


if __name__ == "__main__":
    main()
