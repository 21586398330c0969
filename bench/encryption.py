"""Bench: the cost of encryption at rest on the write path (batch appends) and on keyword search.

In one run, against the database of DATABASE_URL (default: the embedded one under var/):

1. writes: `--threads` rounds; in each, one thread for each of two agents, one written with
   encryption off and one with it on (a generated master key, a temporary key store), each thread
   as `--batches` batch appends of `--batch-size` entries through the write service
   (`thread_append`, the API's path: validation, the COPY, the leaf; with `--metadata` each turn
   carries metadata and a user turn its sender's id and name, which encryption seals too); the two
   take turns batch by batch, in random order, so the load of a shared machine weighs on both alike;
2. searches: `--runs` keyword and `--runs` hybrid searches in each agent's scope, taking turns;
3. with `--items N`: N rounds of `--item-batch` memory items written on each side through the item
   write service (`item_write`, the API's `POST /items` path: the slot lock, the slot's lookup by
   its subject, the entity, the subject index, the audit record), each item about one of 50
   people with metadata (`--items-only`: this alone). With encryption on the value, the subject
   and the metadata are sealed, the subject hashed for its slot's lookups (`subject_hash`).

Prints entries/s and p50/p95 per batch, the client's CPU per entry (this process only: what the
sealing and hashing cost, whatever the machine's load), search p50/p95, and the ratios on / off:
of the totals, and the median (min, max) of the rounds' ratios, which one slow moment moves
little (targets: writes >= 70% of the plaintext rate, keyword search p50 <= 1.5x). The machine's
load average is printed before and after: figures taken on a busy machine are noisier. The jobs
new entries start (embedding, extraction) are switched off for the run: they cost the same with
or without encryption. Everything it writes (agents, threads, data keys, key files) is deleted at
the end.

    python bench/encryption.py [--threads 20 --batches 20 --batch-size 50 --runs 60] [--metadata]
    python bench/encryption.py --items 20 [--item-batch 25] --items-only
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ.setdefault("EMBEDDER", "fake")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

import django

django.setup()

from django.conf import settings  # noqa: E402

from governance.crypto.envelope import data_keys_forget  # noqa: E402
from governance.models import DataKey  # noqa: E402
from memoryapp.agents.services import agent_get_or_create  # noqa: E402
from memoryapp.items.services import item_write  # noqa: E402
from memoryapp.models import Agent  # noqa: E402
from memoryapp.search.retrieval import search  # noqa: E402
from memoryapp.threads.hooks import entries_added_follow  # noqa: E402
from memoryapp.threads.services import thread_append, thread_create  # noqa: E402

WORDS = [
    "garden",
    "tomatoes",
    "watering",
    "soil",
    "compost",
    "seeds",
    "harvest",
    "basil",
    "roses",
    "tulips",
    "marathon",
    "training",
    "running",
    "shoes",
    "knee",
    "pace",
    "interval",
    "tempo",
    "race",
    "medal",
    "guitar",
    "chords",
    "practice",
    "band",
    "concert",
    "song",
    "melody",
    "lyrics",
    "mortgage",
    "bank",
    "interest",
    "rate",
    "savings",
    "budget",
    "loan",
    "payment",
    "vacation",
    "flight",
    "hotel",
    "beach",
    "passport",
    "luggage",
    "island",
    "museum",
    "puppy",
    "dog",
    "walk",
    "vet",
    "leash",
    "treats",
    "recipe",
    "pasta",
    "sauce",
    "garlic",
    "oven",
    "baking",
    "bread",
    "flour",
    "dinner",
    "kitchen",
    "project",
    "deadline",
    "meeting",
    "manager",
    "report",
    "slides",
    "client",
    "review",
    "painting",
    "canvas",
    "sunset",
    "brush",
    "gallery",
    "doctor",
    "allergy",
]
QUERIES = (
    "How is the marathon training going with the knee?",
    "What did we say about the mortgage interest rate?",
    "Which recipe for pasta sauce with garlic?",
    "When is the flight to the island and the hotel?",
    "What did the vet say about the puppy?",
    "Tell me about the painting of the sunset at the gallery",
)


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))).capitalize() + "."


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


class Side:
    """One agent written and searched with encryption off, or on."""

    def __init__(self, label: str, keys: str):
        self.label, self.keys = label, keys
        self.agent, _ = agent_get_or_create(slug=f"bench-enc-{uuid.uuid4().hex[:10]}")
        self.batch_ms: list[float] = []
        self.cpu_ms = 0.0
        self.keyword_ms: list[float] = []
        self.hybrid_ms: list[float] = []
        self.written = 0
        self.item_ms: list[float] = []
        self.item_cpu_ms = 0.0

    def use(self) -> None:
        settings.MEMORY_ENCRYPTION_KEYS = self.keys

    def append(self, thread_id: str, batch: list[dict[str, Any]]) -> None:
        self.use()
        cpu, started = time.process_time(), time.perf_counter()
        thread_append(agent=self.agent, external_id=thread_id, entries=batch)
        self.batch_ms.append((time.perf_counter() - started) * 1000)
        self.cpu_ms += (time.process_time() - cpu) * 1000
        self.written += len(batch)

    def item(self, n: int, rng: random.Random) -> None:
        """One item about one of 50 people, with metadata, in a person's scope."""
        self.use()
        person = rng.randrange(50)
        cpu, started = time.process_time(), time.perf_counter()
        item_write(
            agent=self.agent,
            kind="fact",
            subject=f"Person {person} Example",
            attribute=f"attribute {n % 40}",
            value=sentence(rng),
            trust="system",
            user_id=f"person-{person % 4}",
            metadata={"source": "bench", "ticket": f"T-{rng.randrange(9999)}"},
        )
        self.item_ms.append((time.perf_counter() - started) * 1000)
        self.item_cpu_ms += (time.process_time() - cpu) * 1000

    def item_report(self) -> None:
        print(
            f"{self.label}: {len(self.item_ms)} items: {self.item_rate:,.0f} items/s (p50 "
            f"{statistics.median(self.item_ms):.2f} ms, p95 {pct(self.item_ms, 0.95):.2f} ms); client CPU "
            f"{self.item_cpu_ms * 1000 / len(self.item_ms):.0f} us/item"
        )

    @property
    def item_rate(self) -> float:
        return len(self.item_ms) / (sum(self.item_ms) / 1000)

    def search(self, query: str, method: str) -> int:
        self.use()
        started = time.perf_counter()
        hits = len(search(agent=self.agent, text=query, limit=10, method=method).hits)
        (self.keyword_ms if method == "keyword" else self.hybrid_ms).append((time.perf_counter() - started) * 1000)
        return hits

    def report(self, batch_size: int) -> None:
        print(
            f"{self.label}: {self.written} entries in {len(self.batch_ms)} batches of {batch_size}: "
            f"{self.rate:,.0f} entries/s (batch p50 {statistics.median(self.batch_ms):.1f} ms, "
            f"p95 {pct(self.batch_ms, 0.95):.1f} ms); client CPU {self.cpu_us_per_entry:.0f} us/entry"
        )
        print(
            f"{self.label}: keyword search p50 {statistics.median(self.keyword_ms):.2f} ms, "
            f"p95 {pct(self.keyword_ms, 0.95):.2f} ms; hybrid p50 {statistics.median(self.hybrid_ms):.2f} ms, "
            f"p95 {pct(self.hybrid_ms, 0.95):.2f} ms"
        )

    @property
    def rate(self) -> float:
        return self.written / (sum(self.batch_ms) / 1000)

    @property
    def cpu_us_per_entry(self) -> float:
        return self.cpu_ms * 1000 / self.written

    def delete(self) -> None:
        Agent.objects.filter(pk=self.agent.pk).delete()
        DataKey.objects.filter(agent_id=self.agent.pk).delete()


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def write_round(off: Side, on: Side, thread_id: str, args: argparse.Namespace, rng: random.Random) -> float:
    """One round: a thread of `--batches` batches on each side, taking turns in random order.
    Returns the round's ratio on / off of the entries written per second."""
    done = {side: len(side.batch_ms) for side in (off, on)}
    for _ in range(args.batches):
        batch: list[dict[str, Any]] = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": sentence(rng)} for i in range(args.batch_size)
        ]
        if args.metadata:
            # What a chat front end sends with each turn: who wrote it (a person of the thread's
            # four) and their name, a channel and a ticket; sealed too with encryption on.
            for i, entry in enumerate(batch):
                if i % 2 == 0:
                    person = rng.randrange(4)
                    entry["sender_name"] = f"Customer {person}"
                    entry["metadata"] = {
                        "userId": f"person-{person}",
                        "channel": "web",
                        "ticket": f"T-{rng.randrange(9999)}",
                    }
                else:
                    entry["metadata"] = {"model": "assistant-v2", "latency_ms": rng.randrange(2000)}
        for side in (off, on) if rng.random() < 0.5 else (on, off):
            side.append(thread_id, batch)
    off_ms, on_ms = (sum(side.batch_ms[done[side] :]) for side in (off, on))
    return off_ms / on_ms


def item_round(off: Side, on: Side, args: argparse.Namespace, rng: random.Random, start: int) -> float:
    """One round of `--item-batch` items on each side, taking turns item by item in random order.
    Returns the round's ratio on / off of the items written per second."""
    done = {side: len(side.item_ms) for side in (off, on)}
    for n in range(start, start + args.item_batch):
        seed = rng.randrange(1 << 30)
        for side in (off, on) if rng.random() < 0.5 else (on, off):
            side.item(n, random.Random(seed))
    off_ms, on_ms = (sum(side.item_ms[done[side] :]) for side in (off, on))
    return off_ms / on_ms


def items_run(off: Side, on: Side, args: argparse.Namespace, rng: random.Random) -> None:
    item_round(off, on, argparse.Namespace(**{**vars(args), "item_batch": 5}), rng, 0)  # warm-up, untimed
    for side in (off, on):
        side.item_ms.clear()
        side.item_cpu_ms = 0.0
    ratios = [item_round(off, on, args, rng, r * args.item_batch) for r in range(args.items)]
    off.item_report()
    on.item_report()
    off_cpu, on_cpu = (side.item_cpu_ms * 1000 / len(side.item_ms) for side in (off, on))
    print(
        f"ratio on/off: item writes {on.item_rate / off.item_rate:.0%} of the plaintext rate, median of "
        f"{len(ratios)} rounds {statistics.median(ratios):.0%} (min {min(ratios):.0%}, max {max(ratios):.0%}); "
        f"client CPU +{on_cpu - off_cpu:.0f} us/item"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=20, help="rounds: one thread on each side per round")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument(
        "--metadata",
        action="store_true",
        help="every turn carries metadata (and a user turn its sender's id and name), sealed with encryption on",
    )
    parser.add_argument("--items", type=int, default=0, help="rounds of memory item writes on each side")
    parser.add_argument("--item-batch", type=int, default=25, help="items a side writes in a round")
    parser.add_argument("--items-only", action="store_true", help="only the item writes")
    args = parser.parse_args()
    # The jobs new entries start cost the same with and without encryption: left out of the timing.
    entries_added_follow("embedding", lambda agent_id, thread_pk: None)
    entries_added_follow("extraction", lambda agent_id, thread_pk: None)
    print(f"before: {load()}")

    with tempfile.TemporaryDirectory(prefix="bench-keystore-") as keystore:
        settings.MEMORY_KEYSTORE_DIR = Path(keystore)
        data_keys_forget()
        off = Side("encryption off", "")
        on = Side("encryption on ", f"bench:{secrets.token_hex(32)}")
        try:
            rng = random.Random(7)
            if args.items_only:
                items_run(off, on, args, rng)
                print(f"after: {load()}")
                return
            # One untimed round first: what the first write of a process pays once (imports, the
            # person matcher, the recognisers the write-time detector loads) is not the write's cost.
            for side in (off, on):
                side.use()
                thread_create(agent=side.agent, external_id="warm-up", user_id="person-0")
            write_round(off, on, "warm-up", argparse.Namespace(**{**vars(args), "batches": 1}), rng)
            for side in (off, on):
                side.batch_ms.clear()
                side.cpu_ms = 0.0
                side.written = 0
            ratios: list[float] = []
            for t in range(args.threads):
                for side in (off, on):
                    side.use()
                    thread_create(agent=side.agent, external_id=f"t{t}", user_id=f"person-{t % 4}")
                ratios.append(write_round(off, on, f"t{t}", args, rng))
            for method in ("keyword", "hybrid"):
                for i in range(args.runs):
                    for side in (off, on) if i % 2 == 0 else (on, off):
                        side.search(QUERIES[i % len(QUERIES)], method)
            on.use()
            assert on.search(QUERIES[0], "keyword") > 0, "the blind index found nothing"
            off.report(args.batch_size)
            on.report(args.batch_size)
            print(
                f"ratio on/off: writes {on.rate / off.rate:.0%} of the plaintext rate (target >= 70%), "
                f"median of {len(ratios)} rounds {statistics.median(ratios):.0%} "
                f"(min {min(ratios):.0%}, max {max(ratios):.0%}); client CPU "
                f"+{on.cpu_us_per_entry - off.cpu_us_per_entry:.0f} us/entry"
            )
            print(
                f"ratio on/off: keyword search p50 "
                f"{statistics.median(on.keyword_ms) / statistics.median(off.keyword_ms):.2f}x (target <= 1.5x); "
                f"hybrid search p50 {statistics.median(on.hybrid_ms) / statistics.median(off.hybrid_ms):.2f}x"
            )
            if args.items:
                items_run(off, on, args, rng)
            print(f"after: {load()}")
        finally:
            settings.MEMORY_ENCRYPTION_KEYS = ""
            off.delete()
            on.delete()
            data_keys_forget()


if __name__ == "__main__":
    main()
