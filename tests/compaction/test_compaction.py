"""Compaction: the cut point, the strategies and their options, the compaction entry and how it is read back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from governance.models import AuditRecord, JobRun
from memoryapp.compaction.history import SUMMARY_HEADING, compacted_history
from memoryapp.compaction.plan import CompactionContext, CompactionPlan
from memoryapp.compaction.policy import (
    cut_keeping_recent_tokens,
    find_cut_point,
    should_compact,
    should_compact_tokens,
    thread_branch,
)
from memoryapp.compaction.services import compaction_job, compaction_now, compaction_request, compaction_run
from memoryapp.compaction.strategies import CUSTOM_STRATEGIES, PRESERVED_USER_HEADING, register_compaction_strategy
from memoryapp.forgetting.services import entry_redact
from memoryapp.llm.model import ModelError, ModelUnavailable
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, Thread
from tests.kit.api import Caller, build_context
from tests.kit.factories import EntryFactory, JobRunFactory, ThreadFactory, tool_round, tool_thread


def _entry(type: str = "message", role: str = "user") -> Entry:
    return Entry(type=type, role=role, content="x", seq=0)


def _branch(thread: Thread) -> list[Entry]:
    thread.refresh_from_db()  # the jobs write through their own copy of the thread
    return thread_branch(thread)


def _history_text(thread: Thread) -> str:
    history = compacted_history(_branch(thread))
    return json.dumps([e.content for e in history.entries]) + (history.summary or "")


def _compactions(thread: Thread) -> list[Entry]:
    return list(Entry.objects.filter(thread=thread, type="compaction").order_by("seq"))


# --- cut point and trigger ----------------------------------------------------------------------------


def test_cut_point_keeps_the_newest_entries_and_never_splits_a_tool_call_from_its_result() -> None:
    entries = [
        _entry(role="user"),
        _entry(role="assistant"),  # makes a tool call
        _entry("tool_result", "tool"),
        _entry("tool_result", "tool"),
        _entry(role="assistant"),
        _entry(role="user"),
    ]
    assert find_cut_point(entries, 2) == 4
    # Keeping 4 would start at a tool result: the cut moves forward past both results of the call.
    assert find_cut_point(entries, 4) == 4
    assert find_cut_point(entries, 3) == 4
    assert find_cut_point(entries, 0) == 6  # everything condensed
    assert find_cut_point(entries, 10) == 0  # nothing condensed
    assert find_cut_point([], 3) == 0


def test_should_compact_at_the_trigger_share_of_the_window(alice: Caller) -> None:
    assert should_compact_tokens(800, 1000) and not should_compact_tokens(799, 1000)
    assert not should_compact_tokens(10**9, 0)
    thread = tool_thread(alice.agent, rounds=2)  # about 2,500 tokens
    assert should_compact(thread, window=3000)
    assert not should_compact(thread, window=3000, trigger_ratio=0.9)
    assert not should_compact(thread, window=0)
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 0})
    thread.refresh_from_db()
    assert not should_compact(thread, window=3000)  # counted as the model sees it after clearing


def test_keeping_recent_tokens_keeps_whole_turns_opened_by_a_user_message(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=3)
    entries = compacted_history(_branch(thread)).entries
    cut = cut_keeping_recent_tokens(entries, 1300)
    assert entries[cut].role == "user" and entries[cut].content == "look up page 2"
    assert cut_keeping_recent_tokens(entries, 10) == len(entries)


# --- clear-old-tool-results -----------------------------------------------------------------------------


def test_clearing_over_http_writes_a_compaction_entry_deletes_nothing_and_keeps_the_newest_result(
    alice: Caller,
) -> None:
    thread = tool_thread(alice.agent)
    before = Entry.objects.filter(thread=thread).count()
    response = alice.client.post(
        "/api/v1/threads/t-tools/compact",
        {"strategy": "clear-old-tool-results", "keep_tool_uses": 1},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["compacted"] is True and body["cleared"] == 3
    assert body["entry"]["type"] == "compaction" and body["entry"]["role"] == "user"
    assert body["job_run"]["status"] == "succeeded" and body["job_run"]["kind"] == "compaction"
    assert body["tokens_after"] < body["tokens_before"]
    assert Entry.objects.filter(thread=thread).exclude(type="compaction").count() == before
    thread.refresh_from_db()
    assert thread.active_leaf_id == body["entry"]["id"]  # at the end of the active branch
    listed = alice.client.get("/api/v1/threads/t-tools/entries?types=all&limit=1000").json()["results"]
    assert [e["type"] for e in listed].count("compaction") == 1 and len(listed) == before + 1
    text = _history_text(thread)
    assert "PAGE-3-BODY" in text and "PAGE-0-BODY" not in text and "PAGE-2-BODY" not in text
    assert AuditRecord.objects.filter(action="thread.compact", outcome="written", subject=body["entry"]["id"]).exists()


def test_cleared_placeholder_names_the_read_result_tool_and_the_handle_serves_the_content(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=2)
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    history = compacted_history(_branch(thread))
    cleared = [e for e in history.entries if e.type == "tool_result" and "cleared" in str(e.content)]
    assert len(cleared) == 1
    placeholder = cleared[0].content
    assert placeholder.startswith("[tool result cleared: fetch_page; 1.2k tokens")
    assert f'read_result(handle="{cleared[0].id}")' in placeholder
    stored = Entry.objects.get(pk=cleared[0].id)
    assert "PAGE-0-BODY" in stored.content  # the row itself is untouched
    served = alice.client.get(f"/api/v1/tool-results/{cleared[0].id}")
    assert served.status_code == 200
    assert served.json()["content"].startswith("PAGE-0-BODY") and served.json()["tool_name"] == "fetch_page"


def test_tool_result_handles_are_scoped_to_the_agent(alice: Caller, mallory: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=1)
    result = Entry.objects.filter(thread=thread, type="tool_result").get()
    message = Entry.objects.filter(thread=thread, role="user").first()
    assert mallory.client.get(f"/api/v1/tool-results/{result.id}").status_code == 404
    assert alice.client.get(f"/api/v1/tool-results/{message.id}").status_code == 404  # not a tool result
    assert alice.client.get("/api/v1/tool-results/ent_missing").status_code == 404


def test_compact_and_extract_answer_404_for_another_agents_thread(alice: Caller, mallory: Caller) -> None:
    tool_thread(alice.agent, rounds=1)
    for path, body in (
        ("/api/v1/threads/t-tools/compact", {"strategy": "clear-old-tool-results"}),
        ("/api/v1/threads/t-tools/extract", {}),
    ):
        response = mallory.client.post(path, body, format="json")
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert not JobRun.objects.exists()


def test_exclude_tools_and_keep_tool_uses(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-mixed")
    EntryFactory(thread=thread, role="user", content="go")
    tool_round(thread, 0, tool="read_config", body="CONFIG-BODY " * 50)
    tool_round(thread, 1, tool="fetch_page", body="PAGE-1-BODY " * 50)
    tool_round(thread, 2, tool="fetch_page", body="PAGE-2-BODY " * 50)
    tool_round(thread, 3, tool="fetch_page", body="PAGE-3-BODY " * 50)
    _, outcome = compaction_now(
        thread=thread,
        strategy="clear-old-tool-results",
        options={"keep_tool_uses": 2, "exclude_tools": ["read_config"]},
    )
    assert outcome is not None and outcome.entry is not None
    text = _history_text(thread)
    assert "CONFIG-BODY" in text and "PAGE-1-BODY" not in text
    assert "PAGE-2-BODY" in text and "PAGE-3-BODY" in text


def test_clear_at_least_leaves_small_results_alone(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=2)
    response = alice.client.post(
        "/api/v1/threads/t-tools/compact",
        {"strategy": "clear-old-tool-results", "keep_tool_uses": 1, "clear_at_least": 50_000},
        format="json",
    )
    assert response.status_code == 200 and response.json()["compacted"] is False
    assert response.json()["reason"] == "nothing to compact"
    assert not _compactions(thread)


def test_clear_tool_inputs_blanks_the_paired_call_arguments(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-inputs")
    EntryFactory(thread=thread, role="user", content="write it")
    call, _ = tool_round(thread, 0, tool="write_file", body="ok " * 300)
    call.tool_calls = None
    tool_round(thread, 1, tool="write_file", body="ok " * 300)
    compaction_now(
        thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1, "clear_tool_inputs": True}
    )
    history = compacted_history(_branch(thread))
    calls = [e for e in history.entries if e.tool_calls]
    assert calls[0].tool_calls[0]["arguments"] == {} and calls[1].tool_calls[0]["arguments"] == {"page": 1}
    assert Entry.objects.get(pk=calls[0].id).tool_calls[0]["arguments"] == {"page": 0}
    event = _compactions(thread)[0].event
    assert event["cleared_inputs"] == {calls[0].id: ["c0"]}


def test_without_externalize_or_a_read_tool_the_placeholder_promises_nothing(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=2)
    compaction_now(
        thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1, "externalize": False}
    )
    first = _compactions(thread)[0].event["cleared"]
    assert next(iter(first.values())) == "[tool result cleared: fetch_page; 1.2k tokens]"
    other = tool_thread(alice.agent, rounds=2, external_id="t-no-tool")
    compaction_now(
        thread=other,
        strategy="clear-old-tool-results",
        options={"keep_tool_uses": 1, "read_result_tool_name": None},
    )
    placeholder = next(iter(_compactions(other)[0].event["cleared"].values()))
    assert "read_result" not in placeholder and "handle" in placeholder


def test_clearing_twice_clears_only_what_is_new(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=2)
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    _, again = compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    assert again is not None and again.entry is None  # nothing new to clear
    EntryFactory(thread=thread, role="user", content="one more")
    tool_round(thread, 9)
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    text = _history_text(thread)
    assert "PAGE-9-BODY" in text and "PAGE-1-BODY" not in text and "PAGE-0-BODY" not in text
    assert [len(c.event["cleared"]) for c in _compactions(thread)] == [1, 1]


def test_summarize_fallback_runs_when_clearing_does_not_reach_under_the_trigger(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-fallback")
    for i in range(6):
        EntryFactory(thread=thread, role="user", content=f"question {i} " + "words " * 200)
        EntryFactory(thread=thread, role="assistant", content=f"answer {i} " + "words " * 200)
    tool_round(thread, 0)
    model = ScriptedModel(["The user asked six questions about words."])
    with use_model(model):
        run, outcome = compaction_now(
            thread=thread,
            strategy="clear-old-tool-results",
            options={"keep_tool_uses": 0, "context_window": 2000, "summarize_fallback": {"preserve_recent_turns": 2}},
        )
    assert outcome is not None and outcome.entry is not None
    event = outcome.entry.event
    assert event["fallback"] == "summarize" and event["summary"].startswith(SUMMARY_HEADING)
    assert event["prompt_version"] == "summary_v1" and len(model.calls) == 1
    assert run.usage["calls"] == 1
    history = compacted_history(_branch(thread))
    assert history.summary == event["summary"] and len(history.entries) == 2


def test_summarize_fallback_without_a_model_clears_and_says_the_run_was_partial(alice: Caller) -> None:
    tool_thread(alice.agent, rounds=3)
    with override_settings(LLM_PROVIDER="none"):
        response = alice.client.post(
            "/api/v1/threads/t-tools/compact",
            {"strategy": "clear-old-tool-results", "keep_tool_uses": 1, "context_window": 1000},
            format="json",
        )
    assert response.status_code == 201
    body = response.json()
    assert body["cleared"] == 2 and "summarize fallback skipped" in body["partial"]
    run = JobRun.objects.get(pk=body["job_run"]["id"])
    assert run.status == "succeeded" and "no language model" in run.result["partial"]


# --- summarize-old-preserve-recent ------------------------------------------------------------------------


def _conversation(thread: Thread, turns: int = 6) -> None:
    for i in range(turns):
        EntryFactory(thread=thread, role="user", content=f"user message {i}: please keep the budget under {i}00 euros")
        EntryFactory(thread=thread, role="assistant", content=f"assistant reply {i}")


def test_summary_replaces_old_history_and_keeps_recent_user_messages_verbatim(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-sum")
    _conversation(thread)
    model = ScriptedModel(["Planning a trip on a budget."])
    with use_model(model):
        response = alice.client.post(
            "/api/v1/threads/t-sum/compact",
            {
                "strategy": "summarize-old-preserve-recent",
                "preserve_recent_turns": 4,
                "preserve_user_messages": 2,
                "prompt": "Keep names, decisions and open questions.",
                "summarizer_timeout": 7,
                "async": False,
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    entry = response.json()["entry"]
    content = entry["content"]
    assert content.startswith(SUMMARY_HEADING + "\n\nPlanning a trip on a budget.")
    preserved = content.split(PRESERVED_USER_HEADING)[1]
    assert "user message 2: please keep the budget under 200 euros" in preserved
    assert "user message 3: please keep the budget under 300 euros" in preserved
    assert "user message 1" not in preserved
    assert (
        entry["event"]["prompt_version"] == "summary_v1"
        and entry["event"]["strategy"] == "summarize-old-preserve-recent"
    )
    call = model.calls[0]
    assert call.timeout == 7 and call.system.endswith("Keep names, decisions and open questions.")
    assert "user message 0" in call.messages[0]["content"] and "user message 4" not in call.messages[0]["content"]
    history = compacted_history(_branch(thread))
    assert history.summary == content and history.compaction_id == entry["id"]
    assert [e.content for e in history.entries] == [
        "user message 4: please keep the budget under 400 euros",
        "assistant reply 4",
        "user message 5: please keep the budget under 500 euros",
        "assistant reply 5",
    ]
    run = JobRun.objects.get(pk=response.json()["job_run"]["id"])
    assert run.usage["calls"] == 1 and run.usage["input_tokens"] > 0


def test_summarizer_input_budget_elides_the_oldest_with_a_marker(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-budget")
    _conversation(thread, turns=10)
    model = ScriptedModel(["summary"])
    with use_model(model):
        compaction_now(
            thread=thread,
            strategy="summarize-old-preserve-recent",
            options={"preserve_recent_turns": 2, "summarizer_input_char_budget": 400, "preserve_user_messages": 0},
        )
    sent = model.calls[0].messages[0]["content"]
    assert "earlier messages elided to fit the summarizer's input budget]" in sent
    assert "user message 0:" not in sent and "assistant reply 8" in sent
    event = _compactions(thread)[0].event
    assert event["elided"] > 0 and PRESERVED_USER_HEADING not in event["summary"]


def test_a_second_summary_folds_in_the_first(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-twice")
    _conversation(thread, turns=4)
    with use_model(ScriptedModel(["FIRST SUMMARY", "SECOND SUMMARY"])) as model:
        compaction_now(thread=thread, strategy="summarize-old-preserve-recent", options={"preserve_recent_turns": 2})
        _conversation(thread, turns=3)
        compaction_now(thread=thread, strategy="summarize-old-preserve-recent", options={"preserve_recent_turns": 2})
    assert model is not None
    assert "FIRST SUMMARY" in model.calls[1].messages[0]["content"]
    history = compacted_history(_branch(thread))
    assert "SECOND SUMMARY" in (history.summary or "") and len(history.entries) == 2


def test_summarize_is_async_by_default_and_runs_as_a_job(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-async")
    _conversation(thread)
    with use_model(ScriptedModel(["S"])), django_capture_on_commit_callbacks(execute=True):
        response = alice.client.post(
            "/api/v1/threads/t-async/compact", {"strategy": "summarize-old-preserve-recent"}, format="json"
        )
    assert response.status_code == 202
    run = JobRun.objects.get(pk=response.json()["job_run"]["id"])
    assert run.status == "succeeded" and run.result["compacted"] is True
    assert run.arguments["strategy"] == "summarize-old-preserve-recent" and run.usage["calls"] == 1
    assert len(_compactions(thread)) == 1


def test_without_a_model_summarize_is_skipped_with_its_reason(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-none")
    _conversation(thread)
    with override_settings(LLM_PROVIDER="none"):
        response = alice.client.post(
            "/api/v1/threads/t-none/compact",
            {"strategy": "summarize-old-preserve-recent", "async": False},
            format="json",
        )
    assert response.status_code == 200 and response.json()["compacted"] is False
    run = JobRun.objects.get(pk=response.json()["job_run"]["id"])
    assert run.status == "skipped" and "no language model" in run.result["skipped"]
    assert not _compactions(thread)


def test_a_compaction_in_the_request_whose_model_fails_answers_502_compaction_failed(alice: Caller) -> None:
    """As the async path's run would record it: the run failed with the model's error, no 500."""
    thread = ThreadFactory(agent=alice.agent, external_id="t-model-down")
    _conversation(thread)
    with use_model(ScriptedModel([ModelError("the model answered 500 three times")])):
        response = alice.client.post(
            "/api/v1/threads/t-model-down/compact",
            {"strategy": "summarize-old-preserve-recent", "async": False},
            format="json",
        )
    assert response.status_code == 502, response.content
    error = response.json()["error"]
    assert error["code"] == "compaction_failed"
    assert "summarize-old-preserve-recent" in error["message"] and "500 three times" in error["message"]
    run = JobRun.objects.get(kind="compaction")
    assert run.status == "failed" and "500 three times" in run.error
    assert not _compactions(thread)


def test_bad_compact_requests_are_400_naming_the_field_and_change_nothing(alice: Caller) -> None:
    tool_thread(alice.agent, rounds=1)
    cases = [
        ({"strategy": "shred"}, "strategy"),
        ({"strategy": "clear-old-tool-results", "keep_tool_uses": -1}, "keep_tool_uses"),
        ({"strategy": "clear-old-tool-results", "preserve_recent_turns": 3}, "preserve_recent_turns"),
        ({"strategy": "clear-old-tool-results", "summarize_fallback": "yes"}, "summarize_fallback"),
        ({"strategy": "clear-old-tool-results", "summarize_fallback": {"nope": 1}}, "summarize_fallback.nope"),
        ({"strategy": "clear-old-tool-results", "colour": "red"}, "colour"),
        ({"strategy": "custom", "name": "unregistered"}, "name"),
    ]
    for body, field in cases:
        response = alice.client.post("/api/v1/threads/t-tools/compact", {**body, "async": False}, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["field"] == field, (body, response.json())
    assert not Entry.objects.filter(type="compaction").exists()


# --- refusals, custom strategies, jobs ------------------------------------------------------------------------


def test_a_compaction_whose_entries_were_redacted_while_it_ran_is_refused(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-race")
    _conversation(thread)
    first = Entry.objects.filter(thread=thread).order_by("seq").first()
    assert first is not None

    def summarizer(system: str, messages: list[dict[str, str]]) -> str:
        entry_redact(entry=Entry.objects.select_related("thread").get(pk=first.pk), reason="privacy")
        return "a summary quoting what is now gone"

    with use_model(ScriptedModel(summarizer)):
        response = alice.client.post(
            "/api/v1/threads/t-race/compact",
            {"strategy": "summarize-old-preserve-recent", "preserve_recent_turns": 2, "async": False},
            format="json",
        )
    assert response.status_code == 409 and response.json()["error"]["code"] == "compaction_stale"
    assert not _compactions(thread)
    assert AuditRecord.objects.filter(action="thread.compact", outcome="refused").exists()
    assert JobRun.objects.get(kind="compaction").status == "failed"


def test_an_entry_redacted_before_the_run_does_not_block_compaction(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=3)
    old = Entry.objects.filter(thread=thread, type="tool_result").order_by("seq").first()
    assert old is not None
    entry_redact(entry=Entry.objects.select_related("thread").get(pk=old.pk))
    _, outcome = compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    assert outcome is not None and outcome.entry is not None


def test_custom_strategies_are_python_callables_registered_by_name(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=2)

    @register_compaction_strategy("keep-last-two")
    def keep_last_two(ctx: CompactionContext) -> CompactionPlan | None:
        kept = ctx.view.entries[-2:]
        assert ctx.options == {"label": "mine"}
        return CompactionPlan(
            strategy="custom",
            content=f"{SUMMARY_HEADING}\ncustom summary",
            first_kept_entry_id=kept[0].id,
            first_kept_seq=kept[0].seq,
            summary=f"{SUMMARY_HEADING}\ncustom summary",
            tokens_before=0,
            tokens_after=0,
            covered_ids={e.id for e in ctx.view.entries[:-2]},
        )

    try:
        run, outcome = compaction_now(
            thread=thread, strategy="custom", options={"name": "keep-last-two", "label": "mine"}
        )
    finally:
        CUSTOM_STRATEGIES.pop("keep-last-two")
    assert run.status == "succeeded" and outcome is not None and outcome.entry is not None
    history = compacted_history(_branch(thread))
    assert history.summary == f"{SUMMARY_HEADING}\ncustom summary" and len(history.entries) == 2


def test_a_job_run_again_after_its_worker_died_writes_its_compaction_once(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-crash")
    _conversation(thread)
    run = JobRunFactory(
        kind="compaction",
        arguments={"thread_pk": thread.pk, "strategy": "summarize-old-preserve-recent", "options": {}},
    )
    with use_model(ScriptedModel(lambda s, m: "summary")):
        # The worker wrote the entry, then died before marking the run done.
        compaction_run(thread=thread, strategy="summarize-old-preserve-recent", run=run)
        JobRun.objects.filter(pk=run.pk).update(status="running")
        # Celery delivers the task again (acks_late): the run is claimed again.
        from memoryapp.tasks.compaction import compact_thread

        _conversation(thread, turns=5)  # even with more to compact now
        compact_thread(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.result["reason"] == "already written by this job run"
    assert len(_compactions(thread)) == 1


def test_compaction_request_dedupes_queued_runs_per_thread_and_strategy(alice: Caller) -> None:
    thread = tool_thread(alice.agent, rounds=1)
    first = compaction_request(thread=thread, strategy="hierarchical", actor="admin:ops")
    second = compaction_request(thread=thread, strategy="hierarchical", actor="admin:ops")
    other = compaction_request(thread=thread, strategy="clear-old-tool-results")
    assert first.pk == second.pk != other.pk
    assert first.status == "queued" and first.arguments["thread_pk"] == thread.pk


def test_compaction_job_of_a_deleted_thread_is_skipped(alice: Caller) -> None:
    run = JobRunFactory(kind="compaction", arguments={"thread_pk": 999_999, "strategy": "hierarchical"})
    compaction_job(run)
    run.refresh_from_db()
    assert run.status == "skipped" and run.result["skipped"] == "the thread was deleted"


def test_compaction_service_raises_model_unavailable_only_inside_jobs(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-direct")
    _conversation(thread)
    with override_settings(LLM_PROVIDER="none"), pytest.raises(ModelUnavailable):
        compaction_run(thread=thread, strategy="summarize-old-preserve-recent")


# --- read back by the context builder ------------------------------------------------------------------


def test_context_builder_shows_the_summary_first_and_only_the_newest_tool_result(alice: Caller) -> None:
    tool_thread(alice.agent)
    compacted = alice.client.post(
        "/api/v1/threads/t-tools/compact", {"strategy": "clear-old-tool-results", "keep_tool_uses": 1}, format="json"
    )
    assert compacted.status_code == 201
    body = json.dumps(build_context(alice, "t-tools", strategy="recent", max_tokens=100000))
    assert "PAGE-3-BODY" in body and "PAGE-0-BODY" not in body and "read_result" in body

    thread = ThreadFactory(agent=alice.agent, external_id="t-sum-ctx")
    _conversation(thread)
    with use_model(ScriptedModel(["SUMMARY-OF-EARLIER"])):
        compaction_now(thread=thread, strategy="summarize-old-preserve-recent", options={"preserve_recent_turns": 2})
    messages = build_context(alice, "t-sum-ctx", strategy="recent", max_tokens=100000)["messages"]
    contents = [m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]) for m in messages]
    summary_at = next(i for i, c in enumerate(contents) if "SUMMARY-OF-EARLIER" in c)
    assert all("assistant reply 0" not in c for c in contents)
    assert any("assistant reply 5" in c for c in contents[summary_at + 1 :])
