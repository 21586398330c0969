"""Consolidation's own time per item, apart from the model's: dedupe and folding over one agent's items.

Uses the database of the Django settings (the embedded PostgreSQL under var/ unless DATABASE_URL is
set; run `manage.py migrate` first). Creates an agent of its own, `bench-consolidate-<random>`, and
deletes it (its items, entities, files and consolidation state) at the end; the audit records it
wrote stay, as audit records do.

1. The sample: `--items` items of one person's scope (default 10,000): nine facts for each of
   `items / 10` subjects, two of them repeats of each other, and one lesson a subject (a slot of its
   own), written in bulk as active rows (the setup is not measured).
2. Baseline, in the same run: the plain selection of the scope's active items (every column a pass
   shows), the query every pass starts from, per item.
3. Dedupe: `scope_dedupe` from the start to `complete`, passing `through` on as the scheduled pass
   does (caps `--max-subjects`, `--max-changes`); the scripted model names, for each subject it is
   shown, the repeat to drop. Folding: `playbook_fold` (applied, 20 lessons a fold) until no lesson
   waits; the scripted model adds a rule per fold, then (past 60 rules) rewrites one.
4. For each: wall time, the scripted model's own time (timed inside it), and the service's own time
   per item = (wall - model) / items, next to the baseline's time per item.

    python bench/consolidate.py [--items 10000] [--max-subjects 10] [--max-changes 10]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
os.environ["EMBEDDER"] = "fake"
os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"

import django

django.setup()

from django.utils import timezone  # noqa: E402

from memoryapp.consolidation.dedupe import scope_dedupe  # noqa: E402
from memoryapp.consolidation.fold import PLAYBOOK_PATH, parse_playbook, playbook_fold  # noqa: E402
from memoryapp.items.rules import Scope, normalized_name  # noqa: E402
from memoryapp.llm.model import Completion, Message  # noqa: E402
from memoryapp.llm.port import use_model  # noqa: E402
from memoryapp.llm.scripted import ScriptedModel  # noqa: E402
from memoryapp.models import Agent, Entity, MemoryFileVersion, MemoryItem  # noqa: E402

SCOPE = Scope(user_id="u-bench")
FACTS = (
    ("diet", "vegetarian"),
    ("food", "vegetarian"),  # repeats "diet": what dedupe drops
    ("city", "Porto"),
    ("job", "nurse at the city hospital"),
    ("allergy", "peanuts"),
    ("budget", "about 900 euros"),
    ("language", "Portuguese and English"),
    ("transport", "trains, no flights under 500 km"),
    ("hotel", "quiet rooms away from the street"),
)


class TimedModel:
    """The scripted model, timed as a whole (its answer and its token counts), so the service's own
    time is the rest of the wall time."""

    name = "scripted"
    model = "scripted"
    available = True

    def __init__(self, answer: Callable[[str], str]):
        self.seconds = 0.0
        self.calls = 0
        self._scripted = ScriptedModel(lambda system, messages: answer(messages[-1]["content"]))

    def complete(self, *, system: str, messages: list[Message], max_tokens: int, timeout: float) -> Completion:
        started = time.perf_counter()
        try:
            return self._scripted.complete(system=system, messages=messages, max_tokens=max_tokens, timeout=timeout)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - started


def make_sample(agent: Agent, items: int) -> int:
    """Bulk rows as the services would leave them: entities, active facts with repeats, lessons."""
    subjects = max(1, items // (len(FACTS) + 1))
    now = timezone.now()
    entities = Entity.objects.bulk_create(
        [
            Entity(
                agent=agent, user_id=SCOPE.user_id, name=f"Person {n}", normalized_name=normalized_name(f"Person {n}")
            )
            for n in range(subjects)
        ],
        batch_size=2000,
    )
    rows: list[MemoryItem] = []
    tick = 0
    for entity in entities:
        for attribute, value in FACTS:
            tick += 1
            at = now - timedelta(seconds=items * 2 - tick)
            rows.append(_item(agent, entity, "fact", attribute, value, at))
        tick += 1
        lesson_at = now - timedelta(seconds=items * 2 - tick)
        rows.append(
            _item(agent, entity, "lesson", f"lesson {entity.name}", f"Ask {entity.name} before booking", lesson_at)
        )
    MemoryItem.objects.bulk_create(rows[:items], batch_size=2000)
    return min(items, len(rows))


def _item(agent: Agent, entity: Entity, kind: str, attribute: str, value: str, at: Any) -> MemoryItem:
    return MemoryItem(
        agent=agent,
        user_id=SCOPE.user_id,
        kind=kind,
        entity=entity,
        subject=entity.name,
        attribute=attribute,
        value=value,
        trust="system",
        status="active",
        confidence=1.0,
        valid_from=at,
        recorded_at=at,
    )


_SHOWN = re.compile(r"^\[(mem_\w+)\] \w+, (\w+):", re.M)
_LESSON = re.compile(r"^\[lesson:(mem_\w+)\]", re.M)
_RULE = re.compile(r"^- (.+)$", re.M)


def dedupe_answer(shown: str) -> str:
    """For each subject shown, keep its `diet` item and drop its `food` item (a repeat)."""
    groups = []
    for block in shown.split("\n\nSubject ")[0:]:
        found = dict((attribute, item_id) for item_id, attribute in _SHOWN.findall(block))
        if "diet" in found and "food" in found:
            groups.append({"keep": found["diet"], "drop": [found["food"]], "reason": "duplicate"})
    return json.dumps(groups)


def fold_answer(shown: str) -> str:
    """One edit a fold: a new rule naming the first lesson, or past 60 rules a rewrite of one."""
    lesson = _LESSON.findall(shown)[0]
    playbook = shown.split("\n\nNew lessons", 1)[0]
    rules = [r for r in _RULE.findall(playbook)]
    if len(rules) < 60:
        return json.dumps([{"op": "add", "rule": f"Ask before booking, rule {len(rules)}. [lesson:{lesson}]"}])
    old = rules[len(lesson) % len(rules)]
    return json.dumps([{"op": "rewrite", "old": old, "rule": f"{old} [lesson:{lesson}]"}])


def selection(agent: Agent) -> int:
    return len(
        list(
            MemoryItem.objects.filter(agent=agent, user_id=SCOPE.user_id, status="active").values_list(
                "id", "entity_id", "kind", "attribute", "value", "trust", "recorded_at", "metadata"
            )
        )
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--max-subjects", type=int, default=10)
    parser.add_argument("--max-changes", type=int, default=10)
    args = parser.parse_args(argv)

    agent = Agent.objects.create(slug="bench-consolidate-" + uuid.uuid4().hex[:8], name="consolidation bench")
    try:
        started = time.perf_counter()
        items = make_sample(agent, args.items)
        print(
            f"sample: {items:,} active items of one scope ({agent.slug}, user u-bench), written in {time.perf_counter() - started:.1f}s"
        )

        runs = []
        for _ in range(3):
            began = time.perf_counter()
            selected = selection(agent)
            runs.append(time.perf_counter() - began)
        baseline = sorted(runs)[1]
        print("\nbaseline (same run): the plain selection of the scope's active items")
        print(f"  {baseline * 1000:9.1f} ms for {selected:,} rows   {baseline / selected * 1e6:8.2f} µs/item")

        print(f"\ndedupe (scope_dedupe to complete, max_subjects {args.max_subjects}, max_changes {args.max_changes})")
        model = TimedModel(dedupe_answer)
        passes = calls = stale = 0
        since, since_key, complete = None, "", False
        began = time.perf_counter()
        with use_model(model):
            while not complete:
                outcome = scope_dedupe(
                    agent=agent,
                    scope=SCOPE,
                    since=since,
                    since_key=since_key,
                    max_subjects=args.max_subjects,
                    max_changes=args.max_changes,
                )
                passes, calls, stale = passes + 1, calls + outcome.calls, stale + len(outcome.stale)
                since, since_key, complete = outcome.through, outcome.through_key, outcome.complete
        _report(time.perf_counter() - began, model.seconds, items, baseline)
        print(f"  passes {passes}, model calls {calls}, items marked stale {stale:,}")

        print("\nfolding (playbook_fold applied, 20 lessons a fold, until no lesson waits)")
        model = TimedModel(fold_answer)
        folds = lessons = edits = 0
        began = time.perf_counter()
        with use_model(model):
            while (outcome_fold := playbook_fold(agent=agent, scope=SCOPE, shadow=False)) is not None:
                folds, lessons, edits = (
                    folds + 1,
                    lessons + len(outcome_fold.lesson_ids),
                    edits + len(outcome_fold.edits),
                )
        _report(time.perf_counter() - began, model.seconds, items, baseline)
        playbook = MemoryFileVersion.objects.filter(agent=agent, path=PLAYBOOK_PATH).order_by("-sequence").first()
        rules = len(parse_playbook(playbook.content if playbook else ""))
        versions = MemoryFileVersion.objects.filter(agent=agent, path=PLAYBOOK_PATH).count()
        print(
            f"  folds {folds}, lessons folded {lessons:,}, edits {edits}, playbook versions {versions}, rules {rules}"
        )
    finally:
        agent.delete()
        print(f"\ndeleted agent {agent.slug} and its items, entities, files and consolidation state")


def _report(wall: float, model: float, items: int, baseline: float) -> None:
    own = wall - model
    print(f"  wall {wall:8.2f} s   model {model * 1000:8.1f} ms   service's own {own:8.2f} s")
    print(
        f"  service's own time per item {own / items * 1e6:8.1f} µs   "
        f"({own / baseline if baseline else 0:,.0f}x the baseline's {baseline / items * 1e6:.2f} µs)"
    )


if __name__ == "__main__":
    main()
