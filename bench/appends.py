"""What the benches of a write-time cost share (bench/screening.py, bench/subjects.py): Django set up
for appends in this process, and appends of several cases timed in turns, write by write, in a new
random order each round, so drift of the machine hits every case alike.

Each write is `thread_append` in this process, committed, with its after-commit hooks run as a web
request runs them (embedding and extraction left out: a worker's, the same for every case). Each
is timed by the clock and by this process's CPU time (what the database server spends is not in
the CPU figure; the clock has it).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["LLM_PROVIDER"] = "none"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"

import django

django.setup()

from django.db import transaction  # noqa: E402

from memoryapp.models import Agent, Thread  # noqa: E402
from memoryapp.threads import hooks  # noqa: E402
from memoryapp.threads.services import thread_append, thread_create  # noqa: E402

KINDS = ("batch", "single")

for _name in ("embedding", "extraction"):
    hooks._followers.pop(_name, None)


class Interleaved:
    """Appends of each case (an agent and a thread of its own), timed, with the totals by (case, kind)."""

    def __init__(self, cases: dict[str, Agent], *, thread_id: str, reread: bool = False) -> None:
        """`reread`: read each case's agent before its write, as a request reads it (its registry
        version moves when its people change)."""
        self.cases = cases
        self.reread = reread
        self.threads = {case: thread_create(agent=agent, external_id=thread_id) for case, agent in cases.items()}
        self.seconds: dict[tuple[str, str], float] = {}
        self.cpu: dict[tuple[str, str], float] = {}
        self.entries: dict[tuple[str, str], int] = {}
        self.times: dict[tuple[str, str], list[float]] = {}

    def write(self, case: str, kind: str, specs: list[dict[str, Any]]) -> None:
        agent = Agent.objects.get(pk=self.cases[case].pk) if self.reread else self.cases[case]
        start, cpu = time.perf_counter(), time.process_time()
        with transaction.atomic():
            thread_append(agent=agent, external_id=self.threads[case].external_id, entries=specs)
        took = time.perf_counter() - start
        key = (case, kind)
        self.seconds[key] = self.seconds.get(key, 0.0) + took
        self.cpu[key] = self.cpu.get(key, 0.0) + time.process_time() - cpu
        self.times.setdefault(key, []).append(took)
        self.entries[key] = self.entries.get(key, 0) + len(specs)

    def rounds(
        self, rounds: int, *, batch_size: int, singles: int, specs: Callable[[int], list[dict[str, Any]]]
    ) -> None:
        """Each round: one batch of `batch_size` and `singles` single appends per case, in a new random order."""
        rng = random.Random(7)
        for _ in range(rounds):
            order = [(case, kind) for case in self.cases for kind in KINDS]
            rng.shuffle(order)
            for case, kind in order:
                if kind == "batch":
                    self.write(case, kind, specs(batch_size))
                else:
                    for _ in range(singles):
                        self.write(case, kind, specs(1))

    def report(self, *, base: str) -> None:
        """Entries/s and CPU ms an entry of each case, and their ratios against `base`."""
        print(f"  (ratio: entries/s against {base}; median ratio: {base}'s median write time over the case's,")
        print("   which a burst of another process's work moves less; cpu: this process's CPU ms an entry, and")
        print(f"   {base}'s over the case's)")
        width = max(len(case) for case in self.cases)
        for kind in KINDS:
            rate_base = self.entries[(base, kind)] / self.seconds[(base, kind)]
            median_base = statistics.median(self.times[(base, kind)])
            cpu_base = self.cpu[(base, kind)] / self.entries[(base, kind)]
            for case in self.cases:
                n = self.entries[(case, kind)]
                rate = n / self.seconds[(case, kind)]
                median = statistics.median(self.times[(case, kind)])
                cpu = self.cpu[(case, kind)] / n
                print(
                    f"  {kind:<6} {case:<{width}} {n:>7} entries  {rate:9.1f} entries/s  ratio {rate / rate_base:5.2f}"
                    f"  median ratio {median_base / median:5.2f}  cpu {cpu * 1000:6.3f} ms  ratio {cpu_base / cpu:5.2f}"
                )

    def delete(self) -> None:
        for agent in self.cases.values():
            Thread.objects.filter(agent=agent).delete()
            agent.delete()
