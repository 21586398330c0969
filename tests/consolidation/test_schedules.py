"""The scheduled passes: one job run per agent and kind, usage and cost recorded, caps continued at
the next run, skipped with a clear status when no model is configured."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django_celery_beat.models import PeriodicTask

from governance.jobs.schedules import SCHEDULES
from governance.models import JobRun
from memoryapp.consolidation.passes import consolidation_request
from memoryapp.llm.model import ModelError
from memoryapp.llm.port import use_model
from memoryapp.models import ConsolidationState, MemoryFileVersion, MemoryItem
from memoryapp.tasks.consolidation import (
    consolidation_dedupe_tick,
    consolidation_fold_tick,
    consolidation_observations_tick,
)
from tests.kit.api import Caller
from tests.kit.consolidation import active_item, answering, answers, scripted

pytestmark = pytest.mark.django_db

TICKS = {
    "memoryapp.tasks.consolidation_dedupe_tick": consolidation_dedupe_tick,
    "memoryapp.tasks.consolidation_fold_tick": consolidation_fold_tick,
    "memoryapp.tasks.consolidation_observations_tick": consolidation_observations_tick,
}


def _pairs(caller: Caller, names: tuple[str, ...] = ("Ana", "Ben", "Cy")) -> dict[str, tuple[MemoryItem, MemoryItem]]:
    return {
        name: (
            active_item(agent=caller.agent, subject=name, attribute="diet", value="vegetarian"),
            active_item(agent=caller.agent, subject=name, attribute="food", value="vegetarian"),
        )
        for name in names
    }


def _drop_seconds(pairs: dict[str, tuple[MemoryItem, MemoryItem]]) -> Any:
    return lambda shown: answers(
        *({"keep": a.pk, "drop": [b.pk], "reason": "duplicate"} for a, b in pairs.values() if a.pk in shown)
    )


def _run(caller: Caller, kind: str, capture: Any) -> JobRun:
    with capture(execute=True):
        run = consolidation_request(agent=caller.agent, kind=kind)
    run.refresh_from_db()
    return run


def test_the_three_passes_are_beat_schedules_editable_in_the_admin() -> None:
    declared = {s.task for s in SCHEDULES}
    assert set(TICKS) <= declared
    for task in TICKS:
        row = PeriodicTask.objects.get(task=task)
        assert row.enabled and row.description


def test_with_no_model_each_agents_pass_is_skipped_and_says_why(
    alice: Caller, bob: Caller, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.LLM_PROVIDER = "none"
    _pairs(alice, ("Ana",))
    active_item(agent=alice.agent, kind="lesson", subject="booking", attribute="dates", value="Ask the dates")
    for tick in TICKS.values():
        with django_capture_on_commit_callbacks(execute=True):
            tick()
    runs = {r.kind: r for r in JobRun.objects.all()}
    assert set(runs) == {"consolidation_dedupe", "consolidation_fold", "consolidation_observations"}
    assert {r.agent_id for r in runs.values()} == {alice.agent.pk}  # bob has no memory to work on
    for run in runs.values():
        assert run.status == "skipped" and run.task_name.startswith("memoryapp.tasks.consolidation_")
        assert "no language model is configured (LLM_PROVIDER=none)" in run.result["skipped"]
    assert "marking repeated items stale needs one" in runs["consolidation_dedupe"].result["skipped"]
    assert not MemoryItem.objects.filter(status="stale").exists()


def test_a_dedupe_run_records_its_usage_and_cost_and_the_next_goes_on_where_the_caps_stopped(
    alice: Caller, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.CONSOLIDATION_MAX_SUBJECTS = 2
    settings.LLM_PRICE_INPUT_PER_MTOK = 3.0
    pairs = _pairs(alice)
    model = answering(_drop_seconds(pairs))
    with use_model(model):
        first = _run(alice, "dedupe", django_capture_on_commit_callbacks)
        state = ConsolidationState.objects.get(agent=alice.agent, user_id="u-ana", pass_kind="dedupe")
        assert (first.status, first.result["complete"], state.complete) == ("succeeded", False, False)
        assert first.result["scopes"][0]["stale"] == 2 and first.usage["calls"] == 1
        # The job record names the person by pseudonym only (issue 25 §5).
        assert first.result["scopes"][0]["person"].startswith("psn_") and "u-ana" not in json.dumps(first.result)
        assert first.usage["input_tokens"] > 0 and first.usage["cost_usd"] > 0
        second = _run(alice, "dedupe", django_capture_on_commit_callbacks)
        assert second.result["complete"] and second.result["scopes"][0]["stale"] == 1
        third = _run(alice, "dedupe", django_capture_on_commit_callbacks)
    assert third.result == {**third.result, "scopes": [], "complete": True} and third.usage == {}
    assert len(model.calls) == 2 and "Ana" not in model.calls[1].messages[0]["content"]
    assert MemoryItem.objects.filter(status="stale").count() == 3
    # A new item gives its scope work again.
    active_item(agent=alice.agent, subject="Cy", attribute="city", value="Leeds")
    with use_model(answering(lambda shown: answers())) as again:
        fourth = _run(alice, "dedupe", django_capture_on_commit_callbacks)
    assert fourth.result["scopes"][0]["calls"] == 1 and "Leeds" in again.calls[0].messages[0]["content"]  # type: ignore[union-attr]


def test_a_fold_run_takes_at_most_max_scopes_and_the_next_takes_the_rest(
    alice: Caller, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.CONSOLIDATION_MAX_SCOPES = 1
    lessons = [
        active_item(
            agent=alice.agent, kind="lesson", subject="booking", attribute="dates", value="Ask the dates", user_id=u
        )
        for u in ("u-ana", "u-ben")
    ]
    by_user = {lesson.user_id: lesson for lesson in lessons}

    def reply(shown: str) -> str:
        (lesson,) = (x for x in lessons if x.pk in shown)
        return answers({"op": "add", "rule": f"Ask for the dates first. [lesson:{lesson.pk}]"})

    with use_model(answering(reply)):
        first = _run(alice, "fold", django_capture_on_commit_callbacks)
        second = _run(alice, "fold", django_capture_on_commit_callbacks)
        third = _run(alice, "fold", django_capture_on_commit_callbacks)
    assert [len(r.result["scopes"]) for r in (first, second, third)] == [1, 1, 0]
    assert (first.result["complete"], second.result["complete"]) == (False, True)
    drafts = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/playbook.next.md")
    assert sorted(drafts.values_list("user_id", flat=True)) == sorted(by_user)  # shadow mode: drafts only
    assert first.usage["calls"] == 1 and second.usage["calls"] == 1


def test_observation_runs_write_what_changed_and_nothing_more(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    items = [
        active_item(agent=alice.agent, attribute=a, value=v)
        for a, v in (("diet", "vegetarian"), ("allergy", "peanuts"), ("city", "Porto"))
    ]
    statement = answers({"text": "Ana eats no meat. " + " ".join(f"[item:{i.pk}]" for i in items)})
    with use_model(scripted(statement)):
        first = _run(alice, "observations", django_capture_on_commit_callbacks)
        second = _run(alice, "observations", django_capture_on_commit_callbacks)
    assert len(first.result["scopes"][0]["written"]) == 1 and first.usage["calls"] == 1
    assert second.result["scopes"] == [] and second.usage == {}


def test_a_run_whose_every_scope_failed_fails_and_one_with_others_done_reports_it(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    _pairs(alice, ("Ana",))
    with use_model(scripted(ModelError("the model refused"))):
        failed = _run(alice, "dedupe", django_capture_on_commit_callbacks)
    assert failed.status == "failed" and "the model refused" in failed.error
    active_item(agent=alice.agent, subject="Ben", attribute="diet", value="vegan", user_id="u-ben")
    with use_model(scripted(ModelError("the model refused"), answers())):
        partly = _run(alice, "dedupe", django_capture_on_commit_callbacks)
    assert partly.status == "succeeded" and len(partly.result["errors"]) == 1 and len(partly.result["scopes"]) == 1
    assert not partly.result["complete"]
