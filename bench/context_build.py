"""Bench: context builds and hybrid search on a 10,000-entry thread in a 60,000-entry scope.

    python bench/context_build.py [--thread-entries 10000] [--other-entries 50000] [--runs 40]

Creates its own agent (deleted afterwards) with one thread of N entries and M other entries in
other threads of the same agent, vectors written directly by the configured embedder (the fake
one by default here: set EMBEDDER=local to bench the real model's query embedding), then prints
p50 / p95 of:
  - context builds per strategy (recent, relevant, hybrid), max_tokens 8000;
  - hybrid search (limit 10) server-side, the query's embedding time shown apart;
and, measured in the same run as baselines: a keyword-only search, and a raw SQL fetch of the
thread's newest 200 entries. It never asserts a duration and never stops a server.
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ.setdefault("EMBEDDER", "fake")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The bench writes rows directly: no job may be sent to a broker a running service listens to.
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

import django

django.setup()

from django.db import connection  # noqa: E402

from memoryapp.agents.services import agent_get_or_create  # noqa: E402
from memoryapp.context.builder import ContextRequest, context_build  # noqa: E402
from memoryapp.models import Agent, Entry, Thread  # noqa: E402
from memoryapp.search.embedders import embed_query, embed_texts, embedder, query_cache_clear  # noqa: E402
from memoryapp.search.retrieval import search  # noqa: E402

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


def make_entries(*, agent: Agent, thread: Thread, count: int, rng: random.Random, start: datetime) -> list[Entry]:
    entries: list[Entry] = []
    parent: str | None = None
    texts = [sentence(rng, rng.randrange(len(TOPICS))) for _ in range(count)]
    vectors = []
    for offset in range(0, count, 512):
        vectors.extend(embed_texts(texts[offset : offset + 512]))
    for i, text in enumerate(texts):
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
            embedding=vectors[i],
            embedded_at=start,
        )
        entries.append(entry)
        parent = entry.id
    return entries


def populate(agent: Agent, *, thread_entries: int, other_entries: int) -> Thread:
    rng = random.Random(7)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    main = Thread.objects.create(agent=agent, external_id="bench-main", user_id="u-bench")
    threads = [(main, thread_entries)]
    per_thread = 1000
    for n in range(max(0, other_entries) // per_thread):
        threads.append((Thread.objects.create(agent=agent, external_id=f"bench-{n}", user_id=f"u-{n % 7}"), per_thread))
    for thread, count in threads:
        entries = make_entries(agent=agent, thread=thread, count=count, rng=rng, start=start)
        Entry.objects.bulk_create(entries, batch_size=1000)
        Thread.objects.filter(pk=thread.pk).update(active_leaf_id=entries[-1].id, next_seq=count + 1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memoryapp_entry")
        cursor.execute("ANALYZE memoryapp_thread")
    main.refresh_from_db()
    return main


def timed(runs: int, call: Callable[[int], Any]) -> list[float]:
    call(0)  # warm caches and plans
    times = []
    for i in range(runs):
        started = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - started) * 1000)
    return times


def line(label: str, times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return f"  {label:<44} p50 {statistics.median(times):7.1f} ms   p95 {p95:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread-entries", type=int, default=10_000)
    parser.add_argument("--other-entries", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=8000)
    args = parser.parse_args()

    agent, _ = agent_get_or_create(slug=f"bench-{uuid.uuid4().hex[:10]}")
    try:
        started = time.perf_counter()
        thread = populate(agent, thread_entries=args.thread_entries, other_entries=args.other_entries)
        total = Entry.objects.filter(agent=agent).count()
        print(
            f"setup: {total} entries ({args.thread_entries} in the thread), embedder {embedder().name}, "
            f"{time.perf_counter() - started:.0f} s"
        )
        print(f"context builds (max_tokens {args.max_tokens}, {args.runs} runs each):")
        for strategy in ("recent", "relevant", "hybrid"):

            def build(i: int, strategy: str = strategy) -> Any:
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

            built = build(0)
            print(
                line(strategy, timed(args.runs, build)) + f"   ({built.included_message_count} messages,"
                f" {len(built.recalled_entries)} recalled)"
            )

        print(f"search in the agent's whole scope ({total} entries), limit 10:")
        embed_times: list[float] = []

        def hybrid(i: int) -> Any:
            query_cache_clear()
            outcome = search(agent=agent, text=QUERIES[i % len(QUERIES)], limit=10, method="hybrid")
            embed_times.append(outcome.embed_ms)
            return outcome

        totals = timed(args.runs, hybrid)
        embeds = embed_times[1:]
        print(line("hybrid search, without the query embedding", [t - e for t, e in zip(totals, embeds, strict=True)]))
        print(line(f"  query embedding ({embedder().name})", embeds))
        print(
            line(
                "hybrid search, within the 10,000-entry thread",
                timed(
                    args.runs,
                    lambda i: search(
                        agent=agent, text=QUERIES[i % len(QUERIES)], thread=thread, limit=10, method="hybrid"
                    ),
                ),
            )
        )
        print("baselines, same run:")
        print(
            line(
                "keyword-only search (same selector)",
                timed(
                    args.runs, lambda i: search(agent=agent, text=QUERIES[i % len(QUERIES)], limit=10, method="keyword")
                ),
            )
        )
        vector = embed_query(QUERIES[0])
        print(
            line(
                "vector-only search (query embedded beforehand)",
                timed(args.runs, lambda i: search(agent=agent, text=QUERIES[0], limit=10, method="vector")),
            )
        )
        del vector

        def newest(i: int) -> Any:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT id, role, content, tool_calls FROM memoryapp_entry WHERE thread_id = %s "
                    "ORDER BY seq DESC LIMIT 200",
                    [thread.pk],
                )
                return cursor.fetchall()

        print(line("raw SQL: the thread's newest 200 entries", timed(args.runs, newest)))
    finally:
        started = time.perf_counter()
        Agent.objects.filter(pk=agent.pk).delete()
        print(f"cleanup: bench agent deleted ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
