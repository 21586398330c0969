"""What automatic compaction costs an append: p50/p95 of single appends with it off and on.

Uses the database of the Django settings (the embedded PostgreSQL under var/ unless DATABASE_URL
is set; run `manage.py migrate` first) and the Redis of REDIS_URL (the pending marks). Creates
agents of its own, `bench-auto-*`, and deletes them (threads, entries, job runs) at the end.

Each append is `thread_append` in this process, committed, with its after-commit hooks run as a
web request runs them (embedding and extraction left out, the same for every case). The cases are
interleaved append by append, in a new random order each round, so drift of the machine hits
them alike:

- baseline: no automatic compaction hook at all (what an append cost before it existed);
- off: the agent has automatic compaction off (its settings from the process's cache);
- on, under the trigger: on, the thread far under it (the running count the append left, compared);
- on, past the trigger, job pending: every append joins the pending run (one Redis SET NX);
- and, apart, the append that crosses the trigger: it also creates the run and sends it.

    python bench/autocompact.py [--appends 300]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["LLM_PROVIDER"] = "none"
# The crossing append sends its run to the broker for real; no worker here takes it.
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "0"

import django

django.setup()

from governance.jobs.broker import broker_redis, debounce_mark, debounce_mark_set, job_debounce_clear  # noqa: E402
from governance.models import JobRun  # noqa: E402
from memoryapp.compaction.auto import agent_compaction_settings_set, auto_compaction_key  # noqa: E402
from memoryapp.models import Agent, Thread  # noqa: E402
from memoryapp.threads import hooks  # noqa: E402
from memoryapp.threads.services import thread_append, thread_create  # noqa: E402

# On, with the zero-model strategy: with no model configured here, a summarize job is never sent.
ON = {"enabled": True, "strategy": "clear-old-tool-results"}
TEXT = "Could you plan a day in Rome for us, starting early and avoiding the big queues? " * 3


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--appends", type=int, default=300, help="appends per case")
    parser.add_argument("--crossings", type=int, default=30, help="appends that cross the trigger, measured apart")
    args = parser.parse_args()

    # The same followers for every case but the baseline: embedding and extraction are a worker's.
    compaction_follower = hooks._thread_followers["compaction"]
    for name in ("embedding", "extraction"):
        hooks._followers.pop(name, None)
    tag = uuid.uuid4().hex[:8]
    agents: list[Agent] = []

    def new_agent(name: str, **settings: Any) -> Agent:
        agent = Agent.objects.create(slug=f"bench-auto-{name}-{tag}", name=f"autocompact bench {name}")
        agents.append(agent)
        if settings:
            agent_compaction_settings_set(agent=agent, values=settings, actor="bench")
        return agent

    def new_thread(agent: Agent) -> Thread:
        thread = thread_create(agent=agent, external_id="bench-" + uuid.uuid4().hex[:10])
        job_debounce_clear(auto_compaction_key(thread.pk))
        return thread

    try:
        cases: dict[str, tuple[Agent, Thread, bool]] = {}
        for name, settings, hooked in (
            ("baseline (no hook)", {}, False),
            ("off", {"enabled": False}, True),
            ("on, under the trigger", {**ON, "context_window": 100_000_000}, True),
            ("on, past it, job pending", {**ON, "context_window": 1000, "trigger_ratio": 0.1}, True),
        ):
            agent = new_agent(name.split(" ")[0] + str(len(cases)), **settings)
            cases[name] = (agent, new_thread(agent), hooked)
        pending_thread = cases["on, past it, job pending"][1]
        # A run of this thread is pending (as after the crossing): its appends join it.
        debounce_mark_set(debounce_mark(auto_compaction_key(pending_thread.pk)), ttl=3600)

        def append(agent: Agent, thread: Thread, hooked: bool) -> float:
            if hooked:
                hooks._thread_followers["compaction"] = compaction_follower
            else:
                hooks._thread_followers.pop("compaction", None)
            started = time.perf_counter()
            thread_append(agent=agent, external_id=thread.external_id, entries=[{"role": "user", "content": TEXT}])
            return time.perf_counter() - started

        for agent, thread, hooked in cases.values():  # warm up
            for _ in range(5):
                append(agent, thread, hooked)
        timings: dict[str, list[float]] = {name: [] for name in cases}
        order = list(cases)
        for _ in range(args.appends):
            random.shuffle(order)  # no case always follows the same one
            for name in order:
                agent, thread, hooked = cases[name]
                timings[name].append(append(agent, thread, hooked))

        # The crossing append: a fresh thread just under the trigger, one append past it.
        crossing_agent = new_agent("cross", **ON, context_window=360, trigger_ratio=0.5)
        crossing: list[float] = []
        reference: list[float] = []
        reference_agent, reference_thread, _ = cases["on, under the trigger"]
        for _ in range(args.crossings):
            thread = new_thread(crossing_agent)
            append(crossing_agent, thread, True)  # 65 tokens an append: two stay under the 180 of the trigger
            append(crossing_agent, thread, True)
            crossing.append(append(crossing_agent, thread, True))  # the third crosses it
            reference.append(append(reference_agent, reference_thread, True))
        sent = JobRun.objects.filter(agent_id=crossing_agent.pk).count()

        base = statistics.median(timings["baseline (no hook)"])
        print(
            f"single appends (thread_append, committed, after-commit hooks run), {args.appends} per case, interleaved"
        )
        print(f"  {'case':28} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8} {'p50 vs baseline':>16}")
        for name, values in timings.items():
            p50 = statistics.median(values)
            print(
                f"  {name:28} {p50 * 1000:8.2f} {percentile(values, 0.95) * 1000:8.2f}"
                f" {statistics.mean(values) * 1000:8.2f} {p50 / base:15.2f}x"
            )
        p50 = statistics.median(crossing)
        print(
            f"  {'the append crossing it':28} {p50 * 1000:8.2f} {percentile(crossing, 0.95) * 1000:8.2f}"
            f" {statistics.mean(crossing) * 1000:8.2f} {p50 / statistics.median(reference):15.2f}x"
            f"   (vs 'on, under' measured alongside; {sent} runs sent for {args.crossings} crossings)"
        )
    finally:
        hooks._thread_followers["compaction"] = compaction_follower
        for agent in agents:
            for thread_pk in Thread.objects.filter(agent=agent).values_list("pk", flat=True):
                broker_redis().delete(debounce_mark(auto_compaction_key(thread_pk)))
            JobRun.objects.filter(agent_id=agent.pk).delete()
            agent.delete()
        print(f"\ndeleted {len(agents)} bench agents, their threads, entries and job runs")


if __name__ == "__main__":
    main()
