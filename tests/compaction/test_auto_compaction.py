"""Automatic compaction (004 session manager, 000 `shouldCompact`) and 003's summarizer options.

The trigger runs after the append commits: these tests run the on-commit callbacks (or call the
check as the hook does), the job eagerly in the test process unless a test keeps it queued.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import Client, override_settings

from governance.jobs.broker import broker_redis, debounce_mark, job_debounce_clear
from governance.models import AuditRecord, JobRun
from memoryapp.compaction.auto import (
    AUTO_JOB_TASK,
    agent_compaction_settings_set,
    auto_compaction_check,
    auto_compaction_key,
    history_tokens_recount,
    thread_compaction_lock,
    thread_compaction_set,
)
from memoryapp.compaction.history import compacted_history
from memoryapp.compaction.policy import history_tokens, thread_branch
from memoryapp.compaction.services import compaction_now
from memoryapp.errors import DomainError
from memoryapp.forgetting.services import entry_delete
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Agent, CompactionSettings, Entry, Thread
from memoryapp.prompts import prompt
from memoryapp.tasks.compaction import auto_compact_thread
from memoryapp.threads.services import thread_checkout
from tests.kit.admin import staff_client
from tests.kit.api import Caller, build_context, error_of, get_ok, patch_ok, post_entries, post_entry, post_thread
from tests.kit.audit_names import audit_name
from tests.kit.concurrency import started
from tests.kit.factories import EntryFactory, ThreadFactory, tool_thread
from tests.kit.servers import ModelServer, Reply

SETTINGS = "/api/v1/settings/compaction"
WORDS = "the quick brown fox jumps over the lazy dog " * 20  # about 225 tokens a message


def _thread_settings(thread_id: str) -> str:
    return f"/api/v1/threads/{thread_id}/settings/compaction"


def _settings(agent: Agent, **values: Any) -> None:
    agent_compaction_settings_set(agent=agent, values=values, actor="test")


def _fresh(thread: Thread) -> Thread:
    """The thread with no pending mark left by an earlier test run (pks start again per database)."""
    job_debounce_clear(auto_compaction_key(thread.pk))
    return thread


def _api_thread(caller: Caller, thread_id: str) -> Thread:
    post_thread(caller, thread_id)
    return _fresh(Thread.objects.get(agent=caller.agent, external_id=thread_id))


def _exact_tokens(thread: Thread) -> int:
    thread.refresh_from_db()
    return history_tokens(compacted_history(thread_branch(thread)))


def _auto_runs(thread: Thread) -> list[JobRun]:
    return list(JobRun.objects.filter(task_name=AUTO_JOB_TASK, arguments__thread_pk=thread.pk).order_by("pk"))


def _compactions(thread: Thread) -> list[Entry]:
    return list(Entry.objects.filter(thread=thread, type="compaction").order_by("seq"))


@contextmanager
def _jobs_kept_queued() -> Iterator[None]:
    """Send jobs to the broker for real (nothing consumes queue `extraction` here): they stay queued."""
    from memory_project.celery import app

    app.conf.task_always_eager = False
    try:
        yield
    finally:
        app.conf.task_always_eager = True


# --- the running count ------------------------------------------------------------------------------


def test_appends_keep_the_running_count_of_history_tokens_exact(alice: Caller) -> None:
    thread = _api_thread(alice, "t-count")
    assert thread.history_tokens == 0
    post_entry(alice, "t-count", role="user", content="Look up the weather in Lisbon.")
    post_entries(
        alice,
        "t-count",
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "weather", "arguments": {"q": 1}}],
            },
            {"type": "tool_result", "tool_call_id": "c1", "content": WORDS},
            {"type": "label", "event": {"label": "checkpoint"}},  # an event: not history
            {"role": "assistant", "content": "It is sunny."},
        ],
    )
    thread.refresh_from_db()
    assert thread.history_tokens == _exact_tokens(thread) > 200
    # Another branch: not known until the next check counts it.
    first = Entry.objects.filter(thread=thread).order_by("seq").first()
    assert first is not None
    thread_checkout(thread=thread, entry_id=first.id)
    thread.refresh_from_db()
    assert thread.history_tokens is None
    assert history_tokens_recount(thread=thread) == _exact_tokens(thread)
    thread.refresh_from_db()
    assert thread.history_tokens == _exact_tokens(thread)


def test_deleting_a_compaction_makes_the_count_unknown_and_the_next_check_counts_it(alice: Caller) -> None:
    _settings(alice.agent, enabled=True, context_window=4000, trigger_ratio=0.5, strategy="clear-old-tool-results")
    thread = _fresh(tool_thread(alice.agent, rounds=5))
    _, outcome = compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 0})
    assert outcome is not None and outcome.entry is not None
    history_tokens_recount(thread=thread)
    thread.refresh_from_db()
    assert thread.history_tokens == _exact_tokens(thread) < 2000  # cleared: under the trigger
    entry_delete(entry=outcome.entry, actor="test")
    thread.refresh_from_db()
    assert thread.history_tokens is None  # the cleared results count again
    with _jobs_kept_queued():
        run = auto_compaction_check(thread_pk=thread.pk)
    assert run is not None and run.arguments["tokens"] == _exact_tokens(thread) > 2000


# --- the trigger ------------------------------------------------------------------------------------


def test_a_thread_past_its_trigger_is_compacted_after_the_append_and_not_below_it(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    _settings(alice.agent, enabled=True, context_window=2000, trigger_ratio=0.5, strategy="clear-old-tool-results")
    thread = _api_thread(alice, "t-trigger")
    with django_capture_on_commit_callbacks(execute=True):
        post_entry(alice, "t-trigger", role="user", content="Fetch the pages.")
        post_entries(
            alice,
            "t-trigger",
            [
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "fetch", "arguments": {}}]},
                {"type": "tool_result", "tool_call_id": "c1", "content": WORDS},
            ],
        )
    assert _exact_tokens(thread) < 1000  # under 2000 * 0.5
    assert _auto_runs(thread) == [] and _compactions(thread) == []

    with django_capture_on_commit_callbacks(execute=True):
        for n in range(2, 6):
            post_entries(
                alice,
                "t-trigger",
                [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"id": f"c{n}", "name": "fetch", "arguments": {}}],
                    },
                    {"type": "tool_result", "tool_call_id": f"c{n}", "content": WORDS},
                ],
            )
    runs = _auto_runs(thread)
    assert len(runs) == 1 and runs[0].status == "succeeded", [(r.status, r.result, r.error) for r in runs]
    assert runs[0].result["compacted"] is True and runs[0].result["tokens"] >= 1000
    [compaction] = _compactions(thread)
    assert compaction.event["source"] == "auto-trigger" and compaction.event["strategy"] == "clear-old-tool-results"
    assert AuditRecord.objects.filter(action="thread.compact", actor="auto-compaction", outcome="written").count() == 1
    # Compacted under the trigger now: the next append sends nothing.
    with django_capture_on_commit_callbacks(execute=True):
        post_entry(alice, "t-trigger", role="user", content="Thanks.")
    assert len(_auto_runs(thread)) == 1 and _exact_tokens(thread) < 1000


def test_an_mcp_thread_append_past_the_trigger_is_compacted(
    alice: Caller, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    _settings(alice.agent, enabled=True, context_window=2000, trigger_ratio=0.5, strategy="clear-old-tool-results")
    thread = _api_thread(alice, "t-mcp")
    entries: list[dict[str, Any]] = [{"role": "user", "content": "Fetch five pages."}]
    for n in range(5):
        entries.append(
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{n}", "name": "fetch", "arguments": {}}]}
        )
        entries.append({"type": "tool_result", "tool_call_id": f"c{n}", "content": WORDS})
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "thread_append", "arguments": {"thread_id": "t-mcp", "entries": entries}},
    }
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            "/mcp/",
            json.dumps(call),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {alice.key}",
            HTTP_ACCEPT="application/json, text/event-stream",
            HTTP_MCP_PROTOCOL_VERSION="2025-06-18",
        )
    assert answer.status_code == 200 and "error" not in answer.json(), answer.content
    [run] = _auto_runs(thread)
    assert run.status == "succeeded" and run.result["compacted"] is True
    assert _compactions(thread)[0].event["source"] == "auto-trigger"


def test_an_agent_with_automatic_compaction_off_never_triggers(
    alice: Caller, bob: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    _settings(alice.agent, enabled=False, context_window=1000, trigger_ratio=0.1, strategy="clear-old-tool-results")
    thread = _fresh(tool_thread(alice.agent, rounds=2))
    bob_thread = _fresh(tool_thread(bob.agent, rounds=2))  # bob never set any: off as well
    with django_capture_on_commit_callbacks(execute=True):
        EntryFactory(thread=thread, role="user", content=WORDS)
        EntryFactory(thread=bob_thread, role="user", content=WORDS)
    assert _exact_tokens(thread) > 1000 and _exact_tokens(bob_thread) > 1000
    assert auto_compaction_check(thread_pk=thread.pk) is None
    assert not JobRun.objects.filter(task_name=AUTO_JOB_TASK).exists()
    assert not Entry.objects.filter(type="compaction").exists()


def test_without_a_model_only_the_zero_model_strategies_are_sent(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    summarized = _fresh(tool_thread(alice.agent, rounds=5, external_id="t-none-sum"))
    cleared = _fresh(tool_thread(alice.agent, rounds=5, external_id="t-none-clear"))
    _settings(alice.agent, enabled=True, context_window=2000, trigger_ratio=0.5)  # summarize: needs a model
    thread_compaction_set(thread=cleared, values={"strategy": "clear-old-tool-results"}, actor="test")
    with override_settings(LLM_PROVIDER="none"), django_capture_on_commit_callbacks(execute=True):
        EntryFactory(thread=summarized, role="user", content="more")
        EntryFactory(thread=cleared, role="user", content="more")
    assert _auto_runs(summarized) == [] and _compactions(summarized) == []
    [run] = _auto_runs(cleared)
    assert run.status == "succeeded" and run.result["compacted"] is True
    assert "summarize fallback skipped" in run.result["partial"]


def test_a_threads_own_settings_override_its_agents(alice: Caller, django_capture_on_commit_callbacks: Any) -> None:
    # The agent compacts at 100k tokens; one thread has a window of its own, one turns it off.
    _settings(alice.agent, enabled=True, context_window=100_000, strategy="clear-old-tool-results")
    small = _fresh(tool_thread(alice.agent, rounds=5, external_id="t-small"))
    off = _fresh(tool_thread(alice.agent, rounds=5, external_id="t-off"))
    plain = _fresh(tool_thread(alice.agent, rounds=5, external_id="t-plain"))
    body = patch_ok(alice.client, _thread_settings("t-small"), {"context_window": 2000, "trigger_ratio": 0.5})
    assert body["own"] == {"context_window": 2000, "trigger_ratio": 0.5}
    assert body["effective"]["enabled"] is True and body["effective"]["trigger_tokens"] == 1000
    thread_compaction_set(thread=off, values={"enabled": False, "context_window": 2000}, actor="test")
    with django_capture_on_commit_callbacks(execute=True):
        for thread in (small, off, plain):
            EntryFactory(thread=thread, role="user", content="more")
    assert [len(_auto_runs(t)) for t in (small, off, plain)] == [1, 0, 0]
    assert len(_compactions(small)) == 1 and not _compactions(off) and not _compactions(plain)
    # A null goes back to the agent's setting.
    body = patch_ok(alice.client, _thread_settings("t-small"), {"context_window": None})
    assert body["own"] == {"trigger_ratio": 0.5} and body["effective"]["context_window"] == 100_000
    named = audit_name(agent_id=alice.agent.pk, user_id=small.user_id, value="t-small")
    assert AuditRecord.objects.filter(action="thread.compaction_set", thread_id=named).count() == 2


def test_the_job_checks_again_and_does_nothing_after_a_manual_compaction(alice: Caller) -> None:
    _settings(alice.agent, enabled=True, context_window=4000, trigger_ratio=0.8, strategy="clear-old-tool-results")
    thread = _fresh(tool_thread(alice.agent, rounds=3))
    assert _exact_tokens(thread) > 3200
    with _jobs_kept_queued():
        run = auto_compaction_check(thread_pk=thread.pk)
        assert run is not None
        # A burst: the appends after it join the pending run.
        assert auto_compaction_check(thread_pk=thread.pk) is None
    run.refresh_from_db()
    assert run.status == "queued" and run.dedupe_key == f"autocompact:{thread.pk}" and run.eta is not None
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 0})
    assert len(_compactions(thread)) == 1

    auto_compact_thread(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.result["compacted"] is False and run.result["reason"] == "under the trigger"
    assert len(_compactions(thread)) == 1  # nothing written by the job
    # The run ended: the thread's pending mark is gone, a later crossing sends a new run.
    assert not broker_redis().exists(debounce_mark(auto_compaction_key(thread.pk)))


def test_a_second_run_of_a_thread_does_nothing_while_one_holds_its_lock(alice: Caller) -> None:
    _settings(alice.agent, enabled=True, context_window=4000, strategy="clear-old-tool-results")
    thread = _fresh(tool_thread(alice.agent, rounds=3))
    run = JobRun.objects.create(kind="compaction", task_name=AUTO_JOB_TASK, arguments={"thread_pk": thread.pk})
    # Another process (a database connection of its own) holds the thread's compaction lock.
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with thread_compaction_lock(thread.pk) as taken:
            assert taken
            held.set()
            release.wait(30)

    errors: list[BaseException] = []
    holder = started(hold, errors)
    assert held.wait(30)
    try:
        auto_compact_thread(run.pk)
    finally:
        release.set()
        holder.join(30)
    assert not errors
    run.refresh_from_db()
    assert run.result == {"compacted": False, "reason": "another compaction of this thread is running"}
    assert _compactions(thread) == []


# --- 003's summarizer options -----------------------------------------------------------------------


def _chat(thread: Thread, turns: int = 6) -> None:
    for n in range(turns):
        EntryFactory(thread=thread, role="user", content=f"question {n}: {WORDS}")
        EntryFactory(thread=thread, role="assistant", content=f"answer {n}")


def test_summarizer_model_and_template_reach_the_model_call(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-sum")
    _chat(thread)
    model = ScriptedModel(["Goal: answer the questions."])
    with use_model(model):
        _, outcome = compaction_now(
            thread=thread,
            strategy="summarize-old-preserve-recent",
            options={"summarizer_model": "tiny-summarizer", "template_name": "coding", "preserve_recent_turns": 2},
        )
    assert outcome is not None and outcome.entry is not None
    [call] = model.calls
    assert call.model == "tiny-summarizer"
    assert call.system.startswith(prompt("summary_coding_v1").text)
    event = outcome.entry.event
    assert event["prompt_version"] == "summary_coding_v1" and event["summarizer_model"] == "tiny-summarizer"
    assert event["source"] == "manual"

    # Without them: the provider's own model and the default template.
    other = ThreadFactory(agent=alice.agent, external_id="t-sum-default")
    _chat(other)
    model = ScriptedModel(["Summary."])
    with use_model(model):
        _, outcome = compaction_now(thread=other, strategy="summarize-old-preserve-recent")
    assert model.calls[0].model == "scripted" and model.calls[0].system.startswith(prompt("summary_v1").text)
    assert outcome is not None and outcome.entry is not None and "summarizer_model" not in outcome.entry.event


def test_the_compact_request_takes_the_summarizer_options(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-req")
    _chat(thread)
    model = ScriptedModel(["Brief summary."])
    with use_model(model):
        response = alice.client.post(
            "/api/v1/threads/t-req/compact",
            {
                "strategy": "summarize-old-preserve-recent",
                "summarizer_model": "llama3.1:8b",
                "template_name": "brief",
                "async": False,
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    assert response.json()["prompt_version"] == "summary_brief_v1"
    assert [c.model for c in model.calls] == ["llama3.1:8b"]
    assert model.calls[0].system.startswith(prompt("summary_brief_v1").text)

    # The clearing tier's summary fallback takes them too.
    tools = tool_thread(alice.agent, rounds=3, external_id="t-fallback")
    model = ScriptedModel(["Fallback summary."])
    with use_model(model):
        response = alice.client.post(
            "/api/v1/threads/t-fallback/compact",
            {
                "strategy": "clear-old-tool-results",
                "context_window": 500,
                "summarize_fallback": {"summarizer_model": "small-one", "template_name": "coding"},
            },
            format="json",
        )
    assert response.status_code == 201, response.content
    assert [c.model for c in model.calls] == ["small-one"]
    assert _compactions(tools)[-1].event["prompt_version"] == "summary_coding_v1"

    # Hierarchical reads its chapters with the summarizer model (its own prompt: no template).
    tree = ThreadFactory(agent=alice.agent, external_id="t-tree")
    _chat(tree, turns=4)
    model = ScriptedModel(lambda system, messages: "[]")
    with use_model(model):
        _, outcome = compaction_now(
            thread=tree, strategy="hierarchical", options={"summarizer_model": "reader-1", "keep_recent_tokens": 50}
        )
    assert model.calls and {c.model for c in model.calls} == {"reader-1"}
    assert outcome is not None and outcome.entry is not None
    assert outcome.entry.event["summarizer_model"] == "reader-1"


def test_automatic_compaction_uses_the_agents_summarizer_options(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    _settings(
        alice.agent,
        enabled=True,
        context_window=2000,
        trigger_ratio=0.65,  # six turns of about 238 tokens: crossed once, by the sixth question
        keep_recent=2,
        summarizer_model="cheap-model",
        template_name="brief",
    )
    thread = _fresh(ThreadFactory(agent=alice.agent, external_id="t-auto-sum"))
    brief = prompt("summary_brief_v1").text

    def answer(system: str, messages: list[Any]) -> str:
        # Extraction follows the same appends and asks the same model: its answer is an empty array.
        return "They asked six questions." if system.startswith(brief) else "[]"

    model = ScriptedModel(answer)
    with use_model(model), django_capture_on_commit_callbacks(execute=True):
        _chat(thread)
    [run] = _auto_runs(thread)
    assert run.status == "succeeded" and run.result["compacted"] is True, (run.status, run.error)
    summaries = [c for c in model.calls if c.system.startswith(brief)]
    assert [c.model for c in summaries] == ["cheap-model"]
    assert all(c.model == "scripted" for c in model.calls if c not in summaries)
    [compaction] = _compactions(thread)
    assert compaction.event["source"] == "auto-trigger" and compaction.event["prompt_version"] == "summary_brief_v1"
    assert run.usage["input_tokens"] > 0  # the summarizer call is the job's cost


def test_pre_step_compacts_in_the_context_request(alice: Caller) -> None:
    _settings(alice.agent, enabled=True, context_window=6000, strategy="clear-old-tool-results")
    thread = _fresh(tool_thread(alice.agent, rounds=6, external_id="t-pre"))
    assert _exact_tokens(thread) > 4800
    build_context(alice, "t-pre", max_tokens=8000)
    assert _compactions(thread) == []  # pre_step off: the context request compacts nothing
    patch_ok(alice.client, SETTINGS, {"pre_step": True})
    built = build_context(alice, "t-pre", max_tokens=8000)
    [compaction] = _compactions(thread)
    assert compaction.event["source"] == "pre-step"
    assert "tool result cleared" in str(built)
    # Under the trigger now: the next context request compacts nothing more.
    build_context(alice, "t-pre", max_tokens=8000)
    assert len(_compactions(thread)) == 1


# --- settings through the API and the admin ------------------------------------------------------------


def test_the_agent_reads_and_sets_its_settings_and_bad_values_are_refused(alice: Caller) -> None:
    assert get_ok(alice.client, SETTINGS)["enabled"] is False  # never set: off, with the defaults
    body = patch_ok(
        alice.client,
        SETTINGS,
        {
            "enabled": True,
            "context_window": 32_000,
            "trigger_ratio": 0.75,
            "strategy": "hierarchical",
            "keep_recent": 4,
        },
    )
    assert body["trigger_tokens"] == 24_000 and body["strategy"] == "hierarchical"
    for bad, field in (
        ({"trigger_ratio": 1.5}, "trigger_ratio"),
        ({"trigger_ratio": 0}, "trigger_ratio"),
        ({"context_window": 0}, "context_window"),
        ({"keep_recent": -1}, "keep_recent"),
        ({"strategy": "custom"}, "strategy"),
        ({"summarizer_model": "a model; drop"}, "summarizer_model"),
        ({"template_name": "nope"}, "template_name"),
        ({"template_name": "brief"}, "template_name"),  # hierarchical has no summary template
        ({"enabled": "maybe"}, "enabled"),
        ({"window": 4}, "window"),
    ):
        assert error_of(alice.client.patch(SETTINGS, bad, format="json"))["field"] == field, bad
    assert get_ok(alice.client, SETTINGS) == body  # nothing changed
    assert AuditRecord.objects.filter(action="agent.compaction_set").count() == 1
    post_thread(alice, "t-bad")
    for bad, field in (({"trigger_ratio": 2}, "trigger_ratio"), ({"template_name": "coding"}, "template_name")):
        assert error_of(alice.client.patch(_thread_settings("t-bad"), bad, format="json"))["field"] == field
    assert get_ok(alice.client, _thread_settings("t-bad"))["own"] == {}
    # The compact request checks its summarizer options the same way.
    for bad, field in (
        ({"strategy": "summarize-old-preserve-recent", "template_name": "nope"}, "template_name"),
        ({"strategy": "hierarchical", "template_name": "brief", "async": False}, "template_name"),
        ({"strategy": "summarize-old-preserve-recent", "summarizer_model": "bad model"}, "summarizer_model"),
    ):
        assert error_of(alice.client.post("/api/v1/threads/t-bad/compact", bad, format="json"))["field"] == field
    assert not JobRun.objects.exists()


def test_another_agent_neither_reads_nor_sets_a_threads_settings(alice: Caller, mallory: Caller) -> None:
    post_thread(alice, "t-alice")
    patch_ok(alice.client, SETTINGS, {"enabled": True})
    assert mallory.client.get(_thread_settings("t-alice")).status_code == 404
    assert mallory.client.patch(_thread_settings("t-alice"), {"enabled": False}, format="json").status_code == 404
    # Its own settings are its own.
    assert patch_ok(mallory.client, SETTINGS, {"context_window": 1000})["enabled"] is False
    assert get_ok(alice.client, SETTINGS)["context_window"] == 128_000
    assert Thread.objects.get(agent=alice.agent, external_id="t-alice").compaction == {}


def _admin_form(**values: Any) -> dict[str, Any]:
    form = {
        "enabled": "on",
        "context_window": "64000",
        "trigger_ratio": "0.7",
        "strategy": "summarize-old-preserve-recent",
        "keep_recent": "6",
        "summarizer_model": "gpt-4o-mini",
        "template_name": "coding",
    }
    form.update(values)
    return form


def test_an_operator_edits_an_agents_automatic_compaction_and_a_reviewer_cannot(alice: Caller) -> None:
    operator = staff_client(groups=("Operators",))
    reviewer = staff_client(groups=("Reviewers",))
    page = operator.get(f"/admin/memoryapp/agent/{alice.agent.pk}/change/").content.decode()
    assert "automatic compaction (off)" in page
    response = operator.post("/admin/memoryapp/compactionsettings/add/", {"agent": alice.agent.pk, **_admin_form()})
    assert response.status_code == 302, response.content.decode()[:3000]
    row = CompactionSettings.objects.get(agent=alice.agent)
    assert (row.enabled, row.context_window, row.trigger_ratio, row.template_name) == (True, 64000, 0.7, "coding")
    assert AuditRecord.objects.filter(action="agent.compaction_set", actor__startswith="staff:").count() == 1
    # A bad value is refused on its field; nothing changes.
    response = operator.post(
        f"/admin/memoryapp/compactionsettings/{alice.agent.pk}/change/", _admin_form(trigger_ratio="1.5")
    )
    assert response.status_code == 200 and "trigger_ratio must be a number" in response.content.decode()
    assert f"<h2>automatic compaction of {alice.agent.slug}</h2>" in response.content.decode()  # not its id
    response = operator.post(
        f"/admin/memoryapp/compactionsettings/{alice.agent.pk}/change/", _admin_form(context_window="2000")
    )
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.context_window == 2000 and row.trigger_ratio == 0.7

    # A reviewer sees neither the page nor can change it.
    assert reviewer.get(f"/admin/memoryapp/compactionsettings/{alice.agent.pk}/change/").status_code == 403
    response = reviewer.post(
        f"/admin/memoryapp/compactionsettings/{alice.agent.pk}/change/", _admin_form(enabled="", context_window="9")
    )
    assert response.status_code == 403
    row.refresh_from_db()
    assert row.enabled is True and row.context_window == 2000
    assert AuditRecord.objects.filter(action="agent.compaction_set").count() == 2


def _openai_reply(text: str) -> Reply:
    return Reply(
        200,
        {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        },
    )


def _anthropic_reply(text: str) -> Reply:
    return Reply(
        200,
        {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": {"input_tokens": 9}},
    )


@pytest.mark.parametrize(
    ("provider", "reply", "path"),
    [("openai", _openai_reply, "/v1/chat/completions"), ("anthropic", _anthropic_reply, "/v1/messages")],
)
def test_the_summarizer_model_is_the_model_the_provider_is_asked_for(
    alice: Caller, provider: str, reply: Any, path: str
) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-http")
    _chat(thread)
    replies = [reply("A summary by the small model."), reply("A summary by the agent's model.")]
    server = ModelServer(replies)
    with (
        server.running(),
        override_settings(LLM_PROVIDER=provider, LLM_BASE_URL=server.url + "/v1", LLM_MODEL="agent-large"),
    ):
        compaction_now(
            thread=thread,
            strategy="summarize-old-preserve-recent",
            options={"summarizer_model": "summarizer-small", "preserve_recent_turns": 2},
        )
        other = ThreadFactory(agent=alice.agent, external_id="t-http-2")
        _chat(other)
        compaction_now(thread=other, strategy="summarize-old-preserve-recent")
    assert [(r.path, r.body["model"]) for r in server.seen] == [(path, "summarizer-small"), (path, "agent-large")]


# --- the entry-count trigger (004 messageThreshold) ---------------------------------------------------


def _summaries_only(system: str, messages: list[Any]) -> str:
    """A summary for the summarizer; nothing for the other model work appends start (extraction)."""
    return "Questions were answered." if system.startswith(prompt("summary_v1").text) else "[]"


def _short_chat(thread: Thread, turns: int) -> None:
    for n in range(turns):
        EntryFactory(thread=thread, role="user", content=f"question {n}")
        EntryFactory(thread=thread, role="assistant", content=f"answer {n}")


def test_a_thread_under_its_token_trigger_is_compacted_at_its_entry_count(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    _settings(alice.agent, enabled=True, strategy="summarize-old-preserve-recent", keep_recent=2)
    body = patch_ok(alice.client, SETTINGS, {"message_threshold": 8})
    assert body["message_threshold"] == 8 and body["trigger_tokens"] == 102_400
    thread = _fresh(ThreadFactory(agent=alice.agent, external_id="t-many"))
    with use_model(ScriptedModel(_summaries_only)), django_capture_on_commit_callbacks(execute=True):
        _short_chat(thread, 3)  # 6 entries: under both triggers
        assert _auto_runs(thread) == []
        _short_chat(thread, 1)  # 8 entries, a few dozen tokens of 102,400
    assert _exact_tokens(thread) < 200
    [run] = _auto_runs(thread)
    assert run.status == "succeeded" and run.arguments["entries"] == 8, (run.result, run.error)
    assert run.result["compacted"] is True and run.result["message_threshold"] == 8
    [compaction] = _compactions(thread)
    assert compaction.event["source"] == "auto-trigger"
    # The history the model sees holds the summary and the kept entries now: under the count.
    thread.refresh_from_db()
    assert len(compacted_history(thread_branch(thread)).entries) < 8
    # Off again (null): by tokens only, and 8 more short entries send nothing.
    assert patch_ok(alice.client, SETTINGS, {"message_threshold": None})["message_threshold"] is None
    with django_capture_on_commit_callbacks(execute=True):
        _short_chat(thread, 4)
    assert len(_auto_runs(thread)) == 1


def test_a_threads_own_entry_count_wins_over_its_agents(alice: Caller, django_capture_on_commit_callbacks: Any) -> None:
    _settings(alice.agent, enabled=True, strategy="summarize-old-preserve-recent", keep_recent=2, message_threshold=50)
    own = _fresh(ThreadFactory(agent=alice.agent, external_id="t-own"))
    plain = _fresh(ThreadFactory(agent=alice.agent, external_id="t-plain-count"))
    body = patch_ok(alice.client, _thread_settings("t-own"), {"message_threshold": 6})
    assert body["own"] == {"message_threshold": 6} and body["effective"]["message_threshold"] == 6
    with use_model(ScriptedModel(_summaries_only)), django_capture_on_commit_callbacks(execute=True):
        for thread in (own, plain):
            _short_chat(thread, 3)
    assert [len(_compactions(t)) for t in (own, plain)] == [1, 0]
    # A null goes back to the agent's 50.
    body = patch_ok(alice.client, _thread_settings("t-own"), {"message_threshold": None})
    assert body["own"] == {} and body["effective"]["message_threshold"] == 50


def test_a_bad_entry_count_is_refused_naming_the_field_and_changes_nothing(alice: Caller) -> None:
    post_thread(alice, "t-bad-count")
    for url in (SETTINGS, _thread_settings("t-bad-count")):
        for bad in (0, -3, "ten", 1.5, True, 10_000_001):
            error = error_of(alice.client.patch(url, {"message_threshold": bad}, format="json"))
            assert error["field"] == "message_threshold", (url, bad, error)
    assert get_ok(alice.client, SETTINGS)["message_threshold"] is None
    assert get_ok(alice.client, _thread_settings("t-bad-count"))["own"] == {}
    assert not CompactionSettings.objects.filter(agent=alice.agent).exists()
    with pytest.raises(DomainError) as refused:
        thread_compaction_set(
            thread=Thread.objects.get(agent=alice.agent, external_id="t-bad-count"),
            values={"message_threshold": 0},
            actor="test",
        )
    assert refused.value.field == "message_threshold"
