"""The service's own overhead for compaction and extraction, with a scripted (instant) model.

Uses the database of the Django settings (the embedded PostgreSQL under var/ unless DATABASE_URL
is set). Creates an agent of its own, `bench-compact-<random>`, and deletes it (with its threads,
entries, items and job runs) at the end; the audit records it wrote stay, as audit records do.

1. Builds sample threads of `--entries` entries (a user question, an assistant tool call, a tool
   result of about 600 tokens, an assistant answer; repeated), one per measured run.
2. Baseline, in the same run: reading the active branch (`path_entries`) and `compacted_history`
   of such a thread, the reads every compaction and extraction starts with.
3. Compaction with each strategy (clear-old-tool-results with no model; summarize-old-preserve-
   recent and hierarchical with a scripted model that answers at once), as `compaction_now`
   runs it: entries/s, the multiple of the baseline read, and the tokens before / after.
4. Extraction of the whole thread (windows of 4,000 tokens, one scripted answer each quoting
   every user message): entries/s and items written.

    python bench/compact_extract.py [--entries 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# No background work leaves this process: the embedder is the fake one, jobs run inline, and no
# model is configured outside the measured blocks (so writing the sample does not extract).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
os.environ["LLM_PROVIDER"] = "none"

import django

django.setup()

from governance.models import JobRun  # noqa: E402
from memoryapp.compaction.history import compacted_history  # noqa: E402
from memoryapp.compaction.policy import thread_branch  # noqa: E402
from memoryapp.compaction.services import compaction_now  # noqa: E402
from memoryapp.extraction import schedule as extraction_schedule_module  # noqa: E402
from memoryapp.extraction.services import extraction_now  # noqa: E402
from memoryapp.llm.port import use_model  # noqa: E402
from memoryapp.llm.scripted import ScriptedModel  # noqa: E402
from memoryapp.models import Agent, Thread  # noqa: E402
from memoryapp.search import indexing as indexing_module  # noqa: E402
from memoryapp.threads.selectors import path_entries  # noqa: E402
from memoryapp.threads.services import entries_add, thread_create  # noqa: E402


def _not_in_this_process(**_: Any) -> None:
    return None


# The compaction entry schedules embedding and extraction after commit; in a deployment a
# worker runs those, so they are left out of what this process measures.
extraction_schedule_module.extraction_schedule = _not_in_this_process  # type: ignore[assignment]
indexing_module.embedding_schedule = _not_in_this_process  # type: ignore[assignment]

SENTENCES = (
    "I live in Lisbon and work as a nurse at the city hospital.",
    "We are vegetarian, and my daughter does not like long walks in the heat.",
    "My budget for the trip is about 900 euros, flights included.",
    "Please book the museum tickets for Saturday morning if you can.",
)


def sample_specs(n: int) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    i = 0
    while len(specs) < n:
        call_id = f"c{i}"
        specs.append({"role": "user", "content": f"{SENTENCES[i % len(SENTENCES)]} (turn {i})"})
        specs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": call_id, "name": "fetch_page", "arguments": {"page": i}}],
            }
        )
        specs.append({"type": "tool_result", "tool_call_id": call_id, "content": f"PAGE-{i} " + "lorem ipsum " * 200})
        specs.append({"role": "assistant", "content": f"Here is what page {i} says, in short."})
        i += 1
    return specs[:n]


def make_sample(agent: Agent, n: int) -> Thread:
    thread = thread_create(agent=agent, external_id="bench-" + uuid.uuid4().hex[:10], user_id="u-bench")
    specs = sample_specs(n)
    for start in range(0, len(specs), 500):
        entries_add(thread=thread, entries=specs[start : start + 500])
    thread.refresh_from_db()
    return thread


_NUMBERED_USER = re.compile(r"^\[(\d+)\] [^\n]*? user: (.+)$", re.M)


def extraction_answer(system: str, messages: list[dict[str, str]]) -> str:
    """An item for every user message of the window, quoting its first words (all hold)."""

    items = []
    for number, text in _NUMBERED_USER.findall(messages[0]["content"]):
        quote = " ".join(text.split()[:6])
        items.append(
            {
                "kind": "fact",
                "subject": "user",
                "attribute": f"said in turn {text.rsplit('turn ', 1)[-1].rstrip(')')}",
                "value": quote,
                "evidence": [{"message": int(number), "quote": quote}],
            }
        )
    return "Items:\n" + json.dumps(items)


def hierarchical_answer(system: str, messages: list[dict[str, str]]) -> str:

    found = _NUMBERED_USER.findall(messages[0]["content"])[:3]
    return json.dumps(
        [
            {"kind": "fact", "text": text[:80], "evidence": [{"message": int(n), "quote": text[:40]}]}
            for n, text in found
        ]
    )


def read_compacted(thread: Thread) -> Any:
    return compacted_history(thread_branch(thread))


def timed(fn: Callable[..., Any], **kwargs: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn(**kwargs)
    return time.perf_counter() - started, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    n, runs = args.entries, args.runs

    agent = Agent.objects.create(
        slug="bench-compact-" + uuid.uuid4().hex[:8], name="compaction bench", shadow_mode=True
    )
    try:
        print(f"sample: {n} entries a thread (user, tool call, ~600-token tool result, answer), {runs} runs each")
        started = time.perf_counter()
        threads = [make_sample(agent, n) for _ in range(runs * 5)]
        print(f"  built {len(threads)} threads in {time.perf_counter() - started:.1f}s")
        pool = iter(threads)

        read_times = []
        for _ in range(runs):
            thread = next(pool)
            seconds, _ = timed(read_compacted, thread=thread)
            read_times.append(seconds)
        raw_times = [timed(path_entries, thread=thread)[0] for _ in range(runs)]
        baseline = statistics.median(read_times)
        print("\nbaseline (same run)")
        print(f"  path read (path_entries, history types): {statistics.median(raw_times) * 1000:8.1f} ms")
        print(f"  path read + compacted_history:          {baseline * 1000:8.1f} ms   ({n / baseline:,.0f} entries/s)")

        strategies: list[tuple[str, dict[str, Any], Any]] = [
            ("clear-old-tool-results", {"keep_tool_uses": 3}, None),
            ("summarize-old-preserve-recent", {"preserve_recent_turns": 8}, ScriptedModel(lambda s, m: "A summary.")),
            ("hierarchical", {"keep_recent_tokens": 2000}, ScriptedModel(hierarchical_answer)),
        ]
        print("\ncompaction (compaction_now: read, plan, re-check, write; scripted model answers at once)")
        print(
            f"  {'strategy':32} {'ms':>8} {'entries/s':>10} {'x read':>7} {'tokens before':>14} {'after':>8} {'saved':>7}"
        )
        for name, options, model in strategies:
            times, result = [], {}
            for _ in range(runs):
                thread = next(pool)
                with use_model(model):
                    seconds, (run, _) = timed(compaction_now, thread=thread, strategy=name, options=options)
                times.append(seconds)
                result = run.result
            median = statistics.median(times)
            before, after = result.get("tokens_before", 0), result.get("tokens_after", 0)
            saved = 1 - after / before if before else 0
            print(
                f"  {name:32} {median * 1000:8.1f} {n / median:10,.0f} {median / baseline:7.1f}"
                f" {before:14,} {after:8,} {saved:7.1%}"
            )

        print("\nextraction (extraction_now: windows of 4,000 tokens, one scripted answer each, items written)")
        times, outcome = [], None
        for _ in range(runs):
            thread = next(pool)
            with use_model(ScriptedModel(extraction_answer)):
                seconds, (_, outcome) = timed(extraction_now, thread=thread)
            times.append(seconds)
        median = statistics.median(times)
        assert outcome is not None
        print(
            f"  {median * 1000:8.1f} ms  {n / median:8,.0f} entries/s  {median / baseline:5.1f}x read"
            f"  windows {outcome.windows}, model calls {outcome.model_calls}, items written {outcome.items_written}"
            f" ({outcome.items_written / median:,.0f} items/s)"
        )
    finally:
        JobRun.objects.filter(agent_id=agent.pk).delete()
        agent.delete()
        print(f"\ndeleted agent {agent.slug} and its threads, entries, items and job runs")


if __name__ == "__main__":
    main()
