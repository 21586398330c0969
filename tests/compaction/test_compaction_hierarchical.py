"""Hierarchical compaction: atoms with checked quotes, open items carried until closed on evidence, folding."""

from __future__ import annotations

import json
import re

import pytest
from django.test import override_settings

from governance.models import JobRun
from memoryapp.compaction import hierarchical
from memoryapp.compaction.hierarchical import Levels, dropped_open_items, make_atom
from memoryapp.compaction.history import SUMMARY_HEADING, compacted_history
from memoryapp.compaction.policy import thread_branch
from memoryapp.compaction.services import compaction_now
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, Thread
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory

EVERYTHING = {"keep_recent_tokens": None, "keep_recent": 0}


def _handoff(thread: Thread) -> str:
    return Entry.objects.filter(thread=thread, type="compaction").order_by("-seq").first().content  # type: ignore[union-attr]


def _section(handoff: str, title: str) -> str:
    match = re.search(rf"## {title}\n(.*?)(\n\n|$)", handoff, re.S)
    return match.group(1) if match else ""


def _open_ids(system: str) -> dict[str, str]:
    """{text: id} of the open items the prompt lists."""
    listing = system.split("Items still open:")[1].split("Items done:")[0]
    return {m.group(2): m.group(1) for m in re.finditer(r"\[(a-[0-9a-f]+)\] \w+: (.+)", listing)}


def test_atoms_are_checked_and_the_handoff_keeps_its_sections_in_order(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h1")
    EntryFactory(
        thread=thread, role="user", content="We must keep downtime under 5 minutes. Please migrate the orders table."
    )
    EntryFactory(thread=thread, role="assistant", content="Decided: we will use logical replication.")
    EntryFactory(thread=thread, role="user", content="What about the reports table?")
    answer = [
        {
            "kind": "constraint",
            "status": "open",
            "text": "Downtime under 5 minutes",
            "evidence": [{"message": 1, "quote": "keep downtime under 5 minutes"}],
        },
        {
            "kind": "task",
            "status": "open",
            "text": "Migrate the orders table",
            "evidence": [{"message": 1, "quote": "migrate the  orders table"}],
        },
        {
            "kind": "decision",
            "status": "open",
            "text": "Use logical replication",
            "evidence": [{"message": "[2]", "quote": "we will use logical replication"}],
        },
        {
            "kind": "question",
            "status": "open",
            "text": "What about the reports table?",
            "evidence": [{"message": 3, "quote": "What about the reports table?"}],
        },
        {
            "kind": "fact",
            "status": "open",
            "text": "The database is MySQL",
            "evidence": [{"message": 2, "quote": "we run MySQL"}],
        },
        "not an atom",
        {"kind": "mood", "text": "cheerful"},
    ]
    model = ScriptedModel(["Here are the atoms: " + json.dumps(answer)])
    with use_model(model):
        run, outcome = compaction_now(thread=thread, strategy="hierarchical", options=EVERYTHING)
    assert outcome is not None and outcome.entry is not None
    handoff = outcome.entry.content
    assert handoff.startswith(SUMMARY_HEADING)
    titles = re.findall(r"^## (.+)$", handoff, re.M)
    assert titles == ["Open tasks", "Constraints", "Decisions", "Open questions", "Facts"]
    assert "- The database is MySQL (unverified)" in handoff
    assert "- Migrate the orders table\n" in handoff + "\n"  # whitespace aside, the quote holds
    event = outcome.entry.event
    assert event["prompt_version"] == "hierarchical_v1" and event["atoms_left_out"] == 2
    assert len(event["levels"]["chapters"]) == 1 and event["levels"]["saga"] is None
    assert event["first_kept_entry_id"] is None and event["open_items"] == 4
    transcript = model.calls[0].messages[0]["content"]
    assert "[1] user: We must keep downtime" in transcript and "[3] user: What about" in transcript
    assert run.usage["calls"] == 1
    thread.refresh_from_db()
    history = compacted_history(thread_branch(thread))
    assert history.summary == handoff and history.entries == []


def test_open_items_are_carried_and_closed_only_by_a_quote_that_holds(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h2")
    EntryFactory(thread=thread, role="user", content="Please migrate the orders table.")

    def first(system: str, messages: list[dict[str, str]]) -> str:
        return json.dumps(
            [
                {
                    "kind": "task",
                    "status": "open",
                    "text": "Migrate the orders table",
                    "evidence": [{"message": 1, "quote": "migrate the orders table"}],
                }
            ]
        )

    with use_model(ScriptedModel(first)):
        compaction_now(thread=thread, strategy="hierarchical", options=EVERYTHING)

    EntryFactory(thread=thread, role="assistant", content="I am still copying rows.")
    seen: list[str] = []

    def bad_close(system: str, messages: list[dict[str, str]]) -> str:
        seen.append(system)
        item = _open_ids(system)["Migrate the orders table"]
        return json.dumps(
            [
                {
                    "kind": "task",
                    "status": "closed",
                    "text": "Migration finished",
                    "closes": item,
                    "evidence": [{"message": 1, "quote": "the migration is finished"}],
                }
            ]
        )

    with use_model(ScriptedModel(bad_close)):
        compaction_now(thread=thread, strategy="hierarchical", options=EVERYTHING)
    assert "Migrate the orders table" in seen[0]  # carried into the next chapter's prompt
    handoff = _handoff(thread)
    assert "Migrate the orders table" in _section(handoff, "Open tasks") and "## Done" not in handoff

    EntryFactory(thread=thread, role="assistant", content="Confirmed: the orders table migrated successfully.")

    def good_close(system: str, messages: list[dict[str, str]]) -> str:
        item = _open_ids(system)["Migrate the orders table"]
        return json.dumps(
            [
                {
                    "kind": "task",
                    "status": "closed",
                    "text": "Migration finished",
                    "closes": item,
                    "evidence": [{"message": 1, "quote": "the orders table migrated successfully"}],
                }
            ]
        )

    with use_model(ScriptedModel(good_close)):
        compaction_now(thread=thread, strategy="hierarchical", options=EVERYTHING)
    handoff = _handoff(thread)
    assert "## Open tasks" not in handoff
    assert "Migrate the orders table" in _section(handoff, "Done")
    atoms = Levels.from_event(
        Entry.objects.filter(thread=thread, type="compaction").order_by("-seq")[0].event["levels"]
    ).atoms()
    task = next(a for a in atoms if a["text"] == "Migrate the orders table")
    assert (
        task["closed_by"]["verified"]
        and task["closed_by"]["evidence"][0]["quote"] == "the orders table migrated successfully"
    )


def test_without_a_model_task_lines_failed_tool_calls_and_files_are_still_taken(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h3")
    EntryFactory(thread=thread, role="user", content="Plan:\n- [ ] write tests\nTODO: update the changelog")
    EntryFactory(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": "w1", "name": "write_file", "arguments": {"path": "src/app.py"}}],
    )
    EntryFactory(thread=thread, type="tool_result", tool_call_id="w1", content="Error: permission denied")
    EntryFactory(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": "r1", "name": "run_tests", "arguments": {"suite": "all"}}],
    )
    EntryFactory(
        thread=thread, type="tool_result", tool_call_id="r1", content="Traceback (most recent call last): boom"
    )
    EntryFactory(thread=thread, role="user", content="- [x] write tests")
    with override_settings(LLM_PROVIDER="none"):
        response = alice.client.post(
            "/api/v1/threads/t-h3/compact", {"strategy": "hierarchical", "async": False, **EVERYTHING}, format="json"
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert "no language model" in body["partial"]
    handoff = body["entry"]["content"]
    assert "- update the changelog" in _section(handoff, "Open tasks")
    assert "write tests" in _section(handoff, "Done") and "write tests" not in _section(handoff, "Open tasks")
    assert "- src/app.py" in _section(handoff, "Files")
    errors = _section(handoff, "Unresolved errors")
    assert "write_file failed: Error: permission denied" in errors
    assert "run_tests failed: Traceback (most recent call last): boom" in errors
    assert body["entry"]["event"]["prompt_version"] == ""
    run = JobRun.objects.get(pk=body["job_run"]["id"])
    assert run.status == "succeeded" and run.usage == {}


def test_chapters_fold_into_arcs_and_the_saga_keeps_every_open_item(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h4")
    for i in range(20):
        EntryFactory(thread=thread, role="user", content=f"TODO: chore number {i}\n" + "context " * 60)
    with override_settings(LLM_PROVIDER="none"):
        _, outcome = compaction_now(
            thread=thread,
            strategy="hierarchical",
            options={**EVERYTHING, "chapter_tokens": 200, "chapters_per_arc": 2, "arcs_per_saga": 1},
        )
    assert outcome is not None and outcome.entry is not None
    levels = outcome.entry.event["levels"]
    assert levels["saga"] is not None and len(levels["arcs"]) <= 1 and len(levels["chapters"]) <= 2
    assert outcome.entry.event["chapters_read"] == 20
    open_tasks = _section(outcome.entry.content, "Open tasks")
    assert all(f"- chore number {i}" in open_tasks for i in range(20))


def test_a_summary_that_would_drop_an_open_item_is_refused(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h5")
    EntryFactory(thread=thread, role="user", content="TODO: renew the certificate")
    with override_settings(LLM_PROVIDER="none"):
        compaction_now(thread=thread, strategy="hierarchical", options=EVERYTHING)
        EntryFactory(thread=thread, role="user", content="Anything else? " + "filler " * 100)
        EntryFactory(thread=thread, role="user", content="And then? " + "filler " * 100)
        # A folding that loses items (as a bug, or a custom trim, could).
        monkeypatch.setattr(hierarchical, "_trim_saga", lambda saga: {**saga, "atoms": []})
        response = alice.client.post(
            "/api/v1/threads/t-h5/compact",
            {
                "strategy": "hierarchical",
                "async": False,
                "chapter_tokens": 200,
                "chapters_per_arc": 1,
                "arcs_per_saga": 1,
                **EVERYTHING,
            },
            format="json",
        )
    assert response.status_code == 409 and response.json()["error"]["code"] == "summary_drops_open_items"
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 1
    assert "renew the certificate" in _handoff(thread)


def test_dropped_open_items_accepts_only_evidence_backed_closing() -> None:
    task = make_atom(kind="task", status="open", text="ship it", evidence=[], verified=True, source="model")
    previous = Levels(chapters=[{"from": "a", "to": "b", "atoms": [task]}])
    closed_on_evidence = Levels(
        chapters=[{"from": "a", "to": "b", "atoms": [{**task, "status": "closed", "closed_by": {"verified": True}}]}]
    )
    closed_on_nothing = Levels(chapters=[{"from": "a", "to": "b", "atoms": [{**task, "status": "closed"}]}])
    assert dropped_open_items(previous, previous) == []
    assert dropped_open_items(previous, closed_on_evidence) == []
    assert dropped_open_items(previous, closed_on_nothing) == [task["id"]]
    assert dropped_open_items(previous, Levels()) == [task["id"]]


def test_a_chapter_without_an_array_after_three_tries_is_read_without_a_model(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h6")
    EntryFactory(thread=thread, role="user", content="TODO: call the bank")
    model = ScriptedModel(["I cannot", "Really cannot", "No JSON from me"])
    with use_model(model):
        run, outcome = compaction_now(thread=thread, strategy="hierarchical", options=EVERYTHING)
    assert len(model.calls) == 3
    assert outcome is not None and outcome.entry is not None
    assert "call the bank" in _section(outcome.entry.content, "Open tasks")
    assert "no JSON array after three tries" in run.result["partial"]


def test_chapters_read_concurrently_still_record_every_call_on_the_run(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h7")
    for i in range(6):
        EntryFactory(thread=thread, role="user", content=f"fact {i}: " + "detail " * 120)

    def atoms(system: str, messages: list[dict[str, str]]) -> str:
        transcript = messages[0]["content"]
        found = re.findall(r"\[(\d+)\] user: (fact \d+)", transcript)
        return json.dumps(
            [{"kind": "fact", "text": text, "evidence": [{"message": int(n), "quote": text}]} for n, text in found]
        )

    with use_model(ScriptedModel(atoms)) as model:
        run, outcome = compaction_now(
            thread=thread,
            strategy="hierarchical",
            options={**EVERYTHING, "chapter_tokens": 400, "chapter_concurrency": 3},
        )
    assert model is not None and outcome is not None and outcome.entry is not None
    assert run.usage["calls"] == len(model.calls) == outcome.entry.event["chapters_read"] >= 3
    facts = _section(outcome.entry.content, "Facts")
    assert all(f"- fact {i}\n" in facts + "\n" for i in range(6))


def test_keep_recent_tokens_keeps_the_newest_whole_turns(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-h8")
    for i in range(4):
        EntryFactory(thread=thread, role="user", content=f"question {i} " + "words " * 100)
        EntryFactory(thread=thread, role="assistant", content=f"answer {i} " + "words " * 100)
    with use_model(ScriptedModel(["[]"])):
        _, outcome = compaction_now(thread=thread, strategy="hierarchical", options={"keep_recent_tokens": 400})
    assert outcome is not None and outcome.entry is not None
    thread.refresh_from_db()
    kept = compacted_history(thread_branch(thread)).entries
    assert [str(e.content).split(" ")[:2] for e in kept] == [["question", "3"], ["answer", "3"]]
