"""Extraction: windows, parsing of the model's answer, quotes and trust, idempotent jobs, crashes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from governance.models import JobRun
from memoryapp.extraction.extractor import parse_extraction, trust_of_entry
from memoryapp.extraction.schedule import extraction_schedule
from memoryapp.extraction.services import ExtractionFailed, extraction_now
from memoryapp.extraction.times import resolve_time
from memoryapp.forgetting.services import entry_delete
from memoryapp.llm.model import Completion, ModelError
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, Evidence, MemoryItem, Thread
from memoryapp.tasks.extraction import extract_thread
from tests.kit.api import Caller, patch_ok
from tests.kit.factories import EntryFactory, JobRunFactory, ThreadFactory

WED = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)  # a Wednesday
UTC_ZONE = ZoneInfo("UTC")


def item(attribute: str, value: str, *quotes: tuple[int, str], kind: str = "fact", **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "subject": "user",
        "attribute": attribute,
        "value": value,
        "evidence": [{"message": n, "quote": q} for n, q in quotes],
        **extra,
    }


def answer(*items: Any, before: str = "", after: str = "") -> str:
    return before + json.dumps(list(items)) + after


def _items(thread: Thread) -> list[MemoryItem]:
    return list(MemoryItem.objects.filter(agent=thread.agent).order_by("attribute"))


def _thread(caller: Caller, external_id: str = "t-x", *, shadow: bool = True) -> Thread:
    caller.agent.shadow_mode = shadow
    caller.agent.save(update_fields=["shadow_mode"])
    return ThreadFactory(agent=caller.agent, external_id=external_id)


# --- parsing -----------------------------------------------------------------------------------------------


def test_answer_is_read_past_text_around_it_and_bad_elements_and_quotes_are_dropped(alice: Caller) -> None:
    thread = _thread(alice, "t-parse")
    said = EntryFactory(
        thread=thread, role="user", content="I moved to Lisbon yesterday. I am vegetarian.", created_at=WED
    )
    reply = EntryFactory(thread=thread, role="assistant", content="Noted, Lisbon it is.", created_at=WED)
    elements = json.loads(
        answer(
            item("home city", "Lisbon", (1, "I moved to Lisbon yesterday"), confidence=0.9, valid_from="yesterday"),
            item("diet", "vegetarian", (1, "I am  vegetarian"), (2, "you said vegetarian"), kind="preference"),
            item("pet", "a cat", (1, "I have a cat")),
            42,
            {"kind": "feeling", "attribute": "mood", "value": "happy", "evidence": [{"message": 1, "quote": "I"}]},
            {"kind": "fact", "attribute": None, "value": "x", "evidence": [{"message": 1, "quote": "I"}]},
            item("city", "Lisbon", (9, "I moved")),
        )
    )
    result = parse_extraction(elements, {1: said, 2: reply}, user_id="u-ana", zone=UTC_ZONE)
    assert [(i.attribute, i.value) for i in result.items] == [("home city", "Lisbon"), ("diet", "vegetarian")]
    city, diet = result.items
    assert city.valid_from == datetime(2026, 3, 3, tzinfo=UTC_ZONE) and city.confidence == 0.9
    assert diet.evidence == [{"entry_id": said.id, "quote": "I am  vegetarian"}] and diet.valid_from == said.created_at
    assert result.left_out == 5 and result.quotes_dropped == 3


def test_trust_is_that_of_the_least_trusted_entry_a_holding_quote_is_in(alice: Caller) -> None:
    thread = _thread(alice, "t-trust")
    mine = EntryFactory(thread=thread, role="user", content="My budget is 500 euros.")
    other = EntryFactory(thread=thread, role="user", content="Ana's budget is 900 euros.", metadata={"userId": "u-bob"})
    assistant = EntryFactory(thread=thread, role="assistant", content="Your budget is 500 euros.")
    EntryFactory(
        thread=thread, role="assistant", content="", tool_calls=[{"id": "q1", "name": "lookup", "arguments": {}}]
    )
    tool = EntryFactory(thread=thread, type="tool_result", tool_call_id="q1", content="budget: 500 EUR")
    system = EntryFactory(thread=thread, role="system", content="The user's budget is 500 euros.")
    web = EntryFactory(
        thread=thread, type="tool_result", tool_call_id="q1", content="budget 700", metadata={"source": "web"}
    )
    assert [trust_of_entry(e, "u-ana") for e in (mine, other, assistant, tool, system, web)] == [
        "user",
        "model",
        "model",
        "tool",
        "system",
        "web",
    ]
    numbered = {1: mine, 2: other, 3: assistant, 4: tool, 5: system}
    elements = [
        item("a", "500", (1, "My budget is 500 euros")),
        item("b", "500", (1, "My budget is 500 euros"), (3, "Your budget is 500 euros")),
        item("c", "900", (2, "budget is 900 euros")),
        item("d", "500", (1, "My budget"), (4, "budget: 500 EUR")),
        item("e", "500", (5, "budget is 500 euros"), (1, "My budget")),
        item("f", "500", (1, "My budget"), (3, "not in the message")),  # a quote that fails does not count
    ]
    result = parse_extraction(elements, numbered, user_id="u-ana", zone=UTC_ZONE)
    assert [i.trust for i in result.items] == ["user", "model", "model", "tool", "user", "user"]


def test_time_words_are_resolved_from_the_message_that_said_them() -> None:
    lisbon = ZoneInfo("Europe/Lisbon")
    assert resolve_time("yesterday", WED, UTC_ZONE) == datetime(2026, 3, 3, tzinfo=UTC_ZONE)
    assert resolve_time("3 days ago", WED, UTC_ZONE) == datetime(2026, 3, 1, tzinfo=UTC_ZONE)
    assert resolve_time("in two weeks", WED, UTC_ZONE) == datetime(2026, 3, 18, tzinfo=UTC_ZONE)
    assert resolve_time("next monday", WED, UTC_ZONE) == datetime(2026, 3, 9, tzinfo=UTC_ZONE)
    assert resolve_time("last monday", WED, UTC_ZONE) == datetime(2026, 3, 2, tzinfo=UTC_ZONE)
    assert resolve_time("last wednesday", WED, UTC_ZONE) == datetime(2026, 2, 25, tzinfo=UTC_ZONE)
    assert resolve_time("friday", WED, UTC_ZONE) == datetime(2026, 2, 27, tzinfo=UTC_ZONE)
    assert resolve_time("next month", WED, UTC_ZONE) == datetime(2026, 4, 1, tzinfo=UTC_ZONE)
    assert resolve_time("last year", WED, UTC_ZONE) == datetime(2025, 1, 1, tzinfo=UTC_ZONE)
    assert resolve_time("2025-12-24", WED, UTC_ZONE) == datetime(2025, 12, 24, tzinfo=UTC_ZONE)
    late = datetime(2026, 3, 4, 23, 30, tzinfo=UTC)  # already Thursday in Tokyo
    assert resolve_time("today", late, ZoneInfo("Asia/Tokyo")) == datetime(2026, 3, 5, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert resolve_time("tomorrow", WED, lisbon) == datetime(2026, 3, 5, tzinfo=lisbon)
    assert resolve_time("when pigs fly", WED, UTC_ZONE) is None and resolve_time(None, WED, UTC_ZONE) is None


# --- the service and the API -----------------------------------------------------------------------------


def test_extraction_over_http_writes_checked_items_in_shadow_mode(alice: Caller) -> None:
    thread = _thread(alice, "t-api")
    said = EntryFactory(
        thread=thread, role="user", content="I moved to Lisbon yesterday. I am vegetarian.", created_at=WED
    )
    model = ScriptedModel(
        [
            answer(
                item("home city", "Lisbon", (1, "I moved to Lisbon yesterday"), valid_from="yesterday"),
                item("diet", "vegetarian", (1, "I am vegetarian"), kind="preference"),
                before="From message [1] I found:\n```json\n",
                after="\n```\nThat is all.",
            )
        ]
    )
    with use_model(model):
        response = alice.client.post("/api/v1/threads/t-api/extract", {"async": False}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["job_run"]["status"] == "succeeded" and body["result"]["items_written"] == 2
    assert "[1] 2026-03-04 10:00 (Wednesday) user: I moved to Lisbon" in model.calls[0].messages[0]["content"]
    items = _items(thread)
    assert [(i.attribute, i.status, i.trust, i.prompt_version, i.user_id) for i in items] == [
        ("diet", "suggested", "user", "extraction_v2", "u-ana"),
        ("home city", "suggested", "user", "extraction_v2", "u-ana"),
    ]
    assert items[1].valid_from == datetime(2026, 3, 3, tzinfo=UTC)
    evidence = Evidence.objects.get(item=items[1])
    assert evidence.entry_id == said.id and evidence.status == "verified"
    thread.refresh_from_db()
    assert thread.extraction["through_seq"] == said.seq == body["result"]["through_seq"]
    run = JobRun.objects.get(pk=body["job_run"]["id"])
    assert run.usage["calls"] == 1 and run.result["prompt_version"] == "extraction_v2"
    # The mark is not the agent's metadata: replacing that neither shows nor resets it.
    replaced = patch_ok(
        alice.client, "/api/v1/threads/t-api", {"metadata": {"topic": "moving"}, "replace_metadata": True}
    )
    assert replaced["metadata"] == {"topic": "moving"}
    thread.refresh_from_db()
    assert thread.extraction["through_seq"] == said.seq


def test_without_shadow_mode_a_users_quoted_statement_becomes_active(alice: Caller) -> None:
    thread = _thread(alice, "t-active", shadow=False)
    EntryFactory(thread=thread, role="user", content="I am allergic to peanuts.")
    EntryFactory(thread=thread, role="assistant", content="You told me you are allergic to shellfish.")
    with use_model(
        ScriptedModel(
            [
                answer(
                    item("allergy", "peanuts", (1, "allergic to peanuts")),
                    item("allergy (assistant)", "shellfish", (2, "allergic to shellfish")),
                )
            ]
        )
    ):
        extraction_now(thread=thread)
    statuses = {i.attribute: (i.status, i.trust) for i in _items(thread)}
    assert statuses == {"allergy": ("active", "user"), "allergy (assistant)": ("suggested", "model")}


def test_a_cut_answer_keeps_its_items_and_is_continued(alice: Caller) -> None:
    thread = _thread(alice, "t-cut")
    EntryFactory(thread=thread, role="user", content="I live in Porto. I work at Acme. I play chess.")
    first = answer(item("home city", "Porto", (1, "I live in Porto")), item("employer", "Acme", (1, "I work at Acme")))
    model = ScriptedModel(
        [
            Completion(first[:-1] + ', {"kind": "fact", "attribute": "hob', "length"),
            Completion(answer(item("hobby", "chess", (1, "I play chess"))), "stop"),
        ]
    )
    with use_model(model):
        run, outcome = extraction_now(thread=thread)
    assert outcome is not None and outcome.items_written == 3 and outcome.continuations == 1
    assert "Last complete element" in model.calls[1].messages[-1]["content"]
    assert '"Acme"' in model.calls[1].messages[-1]["content"]
    assert run.usage["calls"] == 2


def test_a_window_without_an_array_fails_alone_and_is_tried_again_later(alice: Caller) -> None:
    thread = _thread(alice, "t-windows")
    EntryFactory(thread=thread, role="user", content="WINDOW-A: I drive a red car. " + "filler " * 2400)
    EntryFactory(thread=thread, role="user", content="WINDOW-B: I drink green tea. " + "filler " * 2400)

    def stubborn(system: str, messages: list[dict[str, str]]) -> str:
        if "WINDOW-A" in messages[0]["content"]:
            return "I would rather not."
        return answer(item("drink", "green tea", (1, "I drink green tea")))

    with use_model(ScriptedModel(stubborn)) as model:
        run, outcome = extraction_now(thread=thread)
    assert model is not None and len(model.calls) == 4  # three tries for A, one for B
    assert outcome is not None and outcome.windows == 2 and len(outcome.failed_windows) == 1
    assert [i.attribute for i in _items(thread)] == ["drink"]
    assert run.status == "succeeded" and run.result["failed_windows"][0]["attempts"] == 1
    thread.refresh_from_db()
    assert len(thread.extraction["failed"]) == 1

    with use_model(ScriptedModel([answer(item("car", "red", (1, "I drive a red car")))])):
        _, again = extraction_now(thread=thread)
    assert again is not None and again.windows == 1 and again.items_written == 1
    assert sorted(i.attribute for i in _items(thread)) == ["car", "drink"]
    thread.refresh_from_db()
    assert thread.extraction["failed"] == []


def test_when_every_window_fails_the_run_fails(alice: Caller) -> None:
    thread = _thread(alice, "t-fail")
    EntryFactory(thread=thread, role="user", content="Hello there.")
    with use_model(ScriptedModel(lambda s, m: "no")), pytest.raises(ExtractionFailed):
        extraction_now(thread=thread)
    run = JobRun.objects.get(kind="extraction")
    assert run.status == "failed" and "JSON array" in run.error


def test_an_extraction_in_the_request_whose_every_window_fails_answers_502_extraction_failed(
    alice: Caller,
) -> None:
    """`async: false` with a model that never answers with a JSON array: a 502 naming what failed
    (the run's error), as the async path's failed run would report it, not a 500."""
    thread = _thread(alice, "t-sync-fail")
    EntryFactory(thread=thread, role="user", content="Hello there.")
    with use_model(ScriptedModel(lambda s, m: "no")):
        response = alice.client.post("/api/v1/threads/t-sync-fail/extract", {"async": False}, format="json")
    assert response.status_code == 502, response.content
    error = response.json()["error"]
    assert error["code"] == "extraction_failed" and "window(s) failed" in error["message"]
    run = JobRun.objects.get(kind="extraction")
    assert run.status == "failed" and run.error.split(": ", 1)[1] in error["message"]
    assert not MemoryItem.objects.exists()


def test_an_extraction_in_the_request_whose_model_errors_answers_502_extraction_failed(alice: Caller) -> None:
    thread = _thread(alice, "t-sync-down")
    EntryFactory(thread=thread, role="user", content="Hello there.")
    with use_model(ScriptedModel([ModelError("the model answered 503 three times")])):
        response = alice.client.post("/api/v1/threads/t-sync-down/extract", {"async": False}, format="json")
    assert response.status_code == 502, response.content
    assert response.json()["error"]["code"] == "extraction_failed"
    assert "503 three times" in response.json()["error"]["message"]
    assert JobRun.objects.get(kind="extraction").status == "failed"


def test_running_extraction_twice_on_the_same_entries_adds_nothing(alice: Caller) -> None:
    thread = _thread(alice, "t-twice")
    EntryFactory(thread=thread, role="user", content="My name is Ana.")
    model = ScriptedModel(lambda s, m: answer(item("name", "Ana", (1, "My name is Ana"))))
    with use_model(model):
        extraction_now(thread=thread)
        _, second = extraction_now(thread=thread)
    assert second is not None and second.windows == 0 and second.items_written == 0
    assert len(model.calls) == 1
    assert MemoryItem.objects.count() == 1 and Evidence.objects.count() == 1


def test_a_worker_killed_mid_job_resumes_after_the_last_whole_window(alice: Caller) -> None:
    thread = _thread(alice, "t-crash")
    EntryFactory(thread=thread, role="user", content="FIRST: I am a nurse. " + "filler " * 2400)
    EntryFactory(thread=thread, role="user", content="SECOND: I live in Braga. " + "filler " * 2400)

    def dies_on_second(system: str, messages: list[dict[str, str]]) -> str:
        if "SECOND" in messages[0]["content"]:
            raise RuntimeError("worker killed")
        return answer(item("job", "nurse", (1, "I am a nurse")))

    with use_model(ScriptedModel(dies_on_second)), pytest.raises(RuntimeError):
        extraction_now(thread=thread)
    assert [i.attribute for i in _items(thread)] == ["job"]  # the first window is whole and kept

    model = ScriptedModel(
        lambda s, m: (
            answer(item("home city", "Braga", (1, "I live in Braga")))
            if "SECOND" in m[0]["content"]
            else answer(item("job", "nurse", (1, "I am a nurse")))
        )
    )
    run = JobRunFactory(kind="extraction", arguments={"thread_pk": thread.pk})
    with use_model(model):
        extract_thread(run.pk)
        # Died before marking the run done: the message is delivered again and the run claimed again.
        JobRun.objects.filter(pk=run.pk).update(status="running")
        extract_thread(run.pk)
    assert len(model.calls) == 1 and "SECOND" in model.calls[0].messages[0]["content"]
    assert sorted(i.attribute for i in _items(thread)) == ["home city", "job"]
    assert Evidence.objects.count() == 2
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 2 and run.result["windows"] == 0


def test_items_whose_entries_were_deleted_while_the_model_answered_are_dropped(alice: Caller) -> None:
    thread = _thread(alice, "t-gone")
    EntryFactory(thread=thread, role="user", content="I speak Portuguese.")
    doomed = EntryFactory(thread=thread, role="user", content="My phone number is 555-0101.")

    def deletes_meanwhile(system: str, messages: list[dict[str, str]]) -> str:
        entry_delete(entry=Entry.objects.select_related("thread").get(pk=doomed.pk))
        return answer(
            item("language", "Portuguese", (1, "I speak Portuguese")),
            item("phone", "555-0101", (2, "My phone number is 555-0101")),
        )

    with use_model(ScriptedModel(deletes_meanwhile)):
        _, outcome = extraction_now(thread=thread)
    assert outcome is not None and outcome.items_written == 1 and outcome.items_dropped_gone == 1
    assert [i.attribute for i in _items(thread)] == ["language"]


def test_without_a_model_extraction_is_skipped_and_never_scheduled(alice: Caller) -> None:
    thread = _thread(alice, "t-none")
    EntryFactory(thread=thread, role="user", content="Hello.")
    with override_settings(LLM_PROVIDER="none"):
        extraction_schedule(thread_pk=thread.pk)
        assert not JobRun.objects.exists()
        response = alice.client.post("/api/v1/threads/t-none/extract", {"async": False}, format="json")
    assert response.status_code == 200
    run = JobRun.objects.get(pk=response.json()["job_run"]["id"])
    assert run.status == "skipped" and "no language model" in run.result["skipped"]
    assert not MemoryItem.objects.exists()


def test_new_entries_schedule_one_debounced_run_per_thread(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    thread = _thread(alice, "t-sched")
    with use_model(ScriptedModel(lambda s, m: answer(item("pet", "a dog", (1, "I have a dog"))))):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            EntryFactory(thread=thread, role="user", content="I have a dog.")
        for callback in callbacks:
            callback()
        with django_capture_on_commit_callbacks(execute=False) as more:
            EntryFactory(thread=thread, role="user", content="It is called Rex.")
        for callback in more:
            callback()
        runs = list(JobRun.objects.filter(kind="extraction"))
        assert len(runs) == 1 and runs[0].status == "queued" and runs[0].dedupe_key == f"extract:{thread.pk}"
        extract_thread(runs[0].pk)
    runs[0].refresh_from_db()
    assert runs[0].status == "succeeded" and [i.attribute for i in _items(thread)] == ["pet"]


def test_extract_endpoint_queues_a_job_and_checks_its_input(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    thread = _thread(alice, "t-queue")
    EntryFactory(thread=thread, role="user", content="I like jazz.")
    model = ScriptedModel([answer(item("music", "jazz", (1, "I like jazz"), kind="preference"))])
    with use_model(model), django_capture_on_commit_callbacks(execute=True):
        response = alice.client.post("/api/v1/threads/t-queue/extract", {}, format="json")
    assert response.status_code == 202
    run = JobRun.objects.get(pk=response.json()["job_run"]["id"])
    assert run.status == "succeeded" and run.result["items_written"] == 1
    for body, field in (({"async": "maybe"}, "async"), ({"window": 3}, "window")):
        bad = alice.client.post("/api/v1/threads/t-queue/extract", body, format="json")
        assert bad.status_code == 400 and bad.json()["error"]["field"] == field
    assert JobRun.objects.count() == 1


def test_an_event_after_the_mark_schedules_no_extraction(alice: Caller) -> None:
    thread = _thread(alice, "t-event")
    EntryFactory(thread=thread, role="user", content="I have a bike.")
    with use_model(ScriptedModel(lambda s, m: answer(item("vehicle", "bike", (1, "I have a bike"))))):
        extraction_now(thread=thread)
        EntryFactory(thread=thread, type="label", event={"label": "checkpoint"})
        extraction_schedule(thread_pk=thread.pk)
        assert JobRun.objects.filter(kind="extraction", status="queued").count() == 0
        EntryFactory(thread=thread, role="user", content="And a scooter.")
        extraction_schedule(thread_pk=thread.pk)
        assert JobRun.objects.filter(kind="extraction", status="queued").count() == 1
