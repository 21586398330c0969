"""Bench: what the access log costs a context build.

    python bench/access_log.py [--thread-entries 2000] [--facts 40] [--runs 60]

Creates its own agent (deleted afterwards) with one thread (bench/context_build.py's `populate`)
and facts about the thread's person, then builds the hybrid context of a turn (history, facts,
recalled entries and items) in rounds, each round once per variant, so drift hits them alike:

  - without: the log and the count turned off (the build's own work only);
  - count only: the items' times_retrieved moved on by one UPDATE (what the builder did before
    the access log: `items.services.note_retrieved`);
  - with the log: the row inserted and the count moved on in one statement (what it does now).

Prints p50 / p95 of each and the ratio of the p50s, plus the logging statement timed alone. It
never asserts a duration.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.context_build import QUERIES, line, populate
from memoryapp.agents.services import agent_get_or_create
from memoryapp.context import builder
from memoryapp.context.builder import ContextRequest, context_build
from memoryapp.items.services import item_write, note_retrieved
from memoryapp.models import AccessLog, Agent
from memoryapp.search.access_log import access_log_record


def without(**kwargs: Any) -> bool:
    return True


def count_only(**kwargs: Any) -> bool:
    note_retrieved(item_ids=kwargs.get("item_ids", ()))
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--thread-entries", type=int, default=2000)
    parser.add_argument("--facts", type=int, default=40)
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()

    agent, _ = agent_get_or_create(slug=f"bench-{uuid.uuid4().hex[:10]}")
    try:
        thread = populate(agent, thread_entries=args.thread_entries, other_entries=0)
        for n in range(args.facts):
            item_write(
                agent=agent,
                kind="fact",
                subject="Bench",
                attribute=f"fact{n}",
                value=f"likes marathon training and garden tomatoes number {n}",
                trust="system",
                user_id="u-bench",
            )

        def build(i: int) -> Any:
            return context_build(
                agent=agent,
                thread=thread,
                request=ContextRequest(
                    max_tokens=8000,
                    strategy="hybrid",
                    system_prompt="You are a helpful assistant.",
                    current_input=QUERIES[i % len(QUERIES)],
                ),
            )

        variants: dict[str, Callable[..., bool]] = {
            "without (no log, no count)": without,
            "count only (note_retrieved, before)": count_only,
            "with the access log (one statement)": access_log_record,
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        built = build(0)  # warm caches and plans
        for i in range(args.runs):
            for name, logger in variants.items():
                builder.access_log_record = logger  # type: ignore[assignment]
                started = time.perf_counter()
                build(i)
                times[name].append((time.perf_counter() - started) * 1000)
        builder.access_log_record = access_log_record
        row = AccessLog.objects.filter(agent=agent).latest("id")
        print(
            f"hybrid context builds, {args.thread_entries}-entry thread, {args.facts} facts, {args.runs} rounds: "
            f"{built.included_message_count} messages, {len(built.facts)} facts, {len(built.recalled_entries)} "
            f"entries and {len(built.recalled_items)} items recalled; a log row holds {len(row.entry_ids)} entry "
            f"and {len(row.item_ids)} item ids"
        )
        for name, measured in times.items():
            print(line(name, measured))
        base = statistics.median(times["without (no log, no count)"])
        for name in list(variants)[1:]:
            print(f"  {name:<44} p50 ratio {statistics.median(times[name]) / base:.3f} of without")

        entry_ids, item_ids = row.entry_ids, row.item_ids
        alone: list[float] = []
        for _ in range(args.runs):
            started = time.perf_counter()
            access_log_record(
                agent_id=agent.pk, thread=thread, source="context", item_ids=item_ids, entry_ids=entry_ids
            )
            alone.append((time.perf_counter() - started) * 1000)
        print(line("the logging statement alone", alone))
    finally:
        Agent.objects.filter(pk=agent.pk).delete()


if __name__ == "__main__":
    main()
