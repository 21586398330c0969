"""Every model call of the service is an audit record (issue 28 item 7): the job run, the model,
tokens and cost, the thread run that caused it; never the prompt nor the answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from governance.audit.chain import audit_verify
from governance.models import AuditRecord, JobRun
from memoryapp.llm.model import ModelError
from memoryapp.llm.port import complete, recording_usage, use_model
from memoryapp.llm.scripted import ScriptedModel
from tests.kit.api import Caller, post_ok, post_thread
from tests.kit.factories import JobRunFactory

MARK = "zqxmarked"  # in every prompt and answer of these tests: no audit record may hold it
PRICES = {"LLM_PRICE_INPUT_PER_MTOK": 3.0, "LLM_PRICE_OUTPUT_PER_MTOK": 15.0}


def _model_calls() -> list[AuditRecord]:
    return list(AuditRecord.objects.filter(action="model.call").order_by("seq"))


def _assert_no_words(records: list[AuditRecord]) -> None:
    for record in records:
        written = json.dumps(
            [record.actor, record.subject, record.outcome, record.thread_id, record.details], default=str
        )
        assert MARK not in written, written


def _extraction_answer(system: str, messages: list[dict[str, str]]) -> str:
    return f"[] and nothing more, {MARK}"


def _thread_with_a_run(caller: Caller) -> str:
    post_thread(caller, "t-audit", user_id="u-ana")
    post_ok(
        caller.client,
        "/api/v1/threads/t-audit/entries",
        {
            "entries": [
                {"role": "user", "content": f"I moved to Lisbon, {MARK}"},
                {"role": "assistant", "content": "ok"},
            ]
        },
    )
    return str(post_ok(caller.client, "/api/v1/threads/t-audit/runs", {})["id"])


@override_settings(**PRICES)
def test_an_extraction_asked_for_by_a_run_is_audited_with_its_job_run_tokens_and_cost(alice: Caller) -> None:
    run_id = _thread_with_a_run(alice)
    model = ScriptedModel(_extraction_answer, model="scripted-large")

    with use_model(model):
        answer = alice.client.post(
            "/api/v1/threads/t-audit/extract", {"async": False}, format="json", HTTP_X_RUN_ID=run_id
        )

    assert answer.status_code == 200, answer.json()
    job = JobRun.objects.get(pk=answer.json()["job_run"]["id"])
    [record] = _model_calls()
    assert len(model.calls) == 1 and MARK in model.calls[0].messages[0]["content"]
    assert record.agent_id == alice.agent.pk and record.outcome == "completed"
    assert record.actor == "job:extraction" and record.subject == f"job_run:{job.pk}"
    details = record.details
    assert details["job_run"] == job.pk and details["job"] == "extraction" and details["thread_run"] == run_id
    assert (details["provider"], details["model"]) == ("scripted", "scripted-large")
    assert details["input_tokens"] > 10 and details["output_tokens"] > 3
    expected_cost = round((details["input_tokens"] * 3.0 + details["output_tokens"] * 15.0) / 1e6, 6)
    assert details["cost_usd"] == expected_cost == job.usage["cost_usd"]
    assert (details["input_tokens"], details["output_tokens"]) == (
        job.usage["input_tokens"],
        job.usage["output_tokens"],
    )
    _assert_no_words([record])
    assert audit_verify().ok


def test_a_run_of_another_thread_or_agent_is_not_found_and_nothing_is_called(alice: Caller, bob: Caller) -> None:
    run_id = _thread_with_a_run(alice)
    post_thread(bob, "t-audit", user_id="u-ben")
    model = ScriptedModel(_extraction_answer)

    with use_model(model):
        answer = bob.client.post(
            "/api/v1/threads/t-audit/extract", {"async": False}, format="json", HTTP_X_RUN_ID=run_id
        )

    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    assert model.calls == [] and _model_calls() == []


def test_the_job_a_write_of_a_run_asks_for_carries_the_run_to_its_model_calls(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    """The write carries X-Run-Id; extraction is sent after its commit (eager here), as a job whose
    arguments name the run, and its model call's record names it too."""
    post_thread(alice, "t-audit", user_id="u-ana")
    run_id = str(post_ok(alice.client, "/api/v1/threads/t-audit/runs", {})["id"])
    model = ScriptedModel(_extraction_answer)

    with use_model(model), django_capture_on_commit_callbacks(execute=True):
        answer = alice.client.post(
            "/api/v1/threads/t-audit/entries",
            {"role": "user", "content": f"My sister is a nurse, {MARK}"},
            format="json",
            HTTP_X_RUN_ID=run_id,
        )

    assert answer.status_code == 201, answer.json()
    job = JobRun.objects.get(kind="extraction")
    assert job.arguments["thread_run_id"] == run_id and job.status == JobRun.Status.SUCCEEDED
    [record] = _model_calls()
    assert record.details["job_run"] == job.pk and record.details["thread_run"] == run_id
    _assert_no_words([record])


def test_a_model_call_outside_any_run_names_none_and_a_failed_call_is_recorded(db: None) -> None:
    job = JobRunFactory(kind="consolidation")
    model = ScriptedModel([f"fine, {MARK}", ModelError(f"refused: {MARK}")])

    with use_model(model), recording_usage(job):
        complete(system=f"system {MARK}", messages=[{"role": "user", "content": MARK}])
        with pytest.raises(ModelError):
            complete(system=f"system {MARK}", messages=[{"role": "user", "content": MARK}])

    done, failed = _model_calls()
    assert done.outcome == "completed" and done.details["thread_run"] is None and done.details["job_run"] == job.pk
    assert failed.outcome == "failed" and failed.details["error"] == "ModelError"
    assert failed.details["input_tokens"] == failed.details["output_tokens"] == 0
    job.refresh_from_db()
    assert job.usage["calls"] == 1  # the failed call cost nothing
    _assert_no_words([done, failed])


@pytest.mark.parametrize(
    ("strategy", "options"),
    [
        ("summarize-old-preserve-recent", {"preserve_recent_turns": 0}),
        ("hierarchical", {"keep_recent_tokens": None, "keep_recent": 0}),
    ],
)
def test_a_compaction_now_in_a_run_audits_each_model_call(alice: Caller, strategy: str, options: Any) -> None:
    """The summary is one call in the job; the hierarchical chapters are asked in worker threads
    (`record=False`) and recorded by the job afterwards: both are audited the same way."""
    run_id = _thread_with_a_run(alice)
    model = ScriptedModel(lambda system, messages: f"[] {MARK}" if "[" in system else f"A summary, {MARK}.")

    with use_model(model):
        answer = alice.client.post(
            "/api/v1/threads/t-audit/compact",
            {"strategy": strategy, "async": False, **options},
            format="json",
            HTTP_X_RUN_ID=run_id,
        )

    assert answer.status_code in (200, 201), answer.json()
    job = JobRun.objects.get(pk=answer.json()["job_run"]["id"])
    records = _model_calls()
    assert len(records) == len(model.calls) >= 1
    assert {(r.details["job_run"], r.details["job"], r.details["thread_run"]) for r in records} == {
        (job.pk, "compaction", run_id)
    }
    assert sum(r.details["input_tokens"] for r in records) == job.usage["input_tokens"] > 0
    _assert_no_words(records)
