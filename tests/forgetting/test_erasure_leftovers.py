"""What an erasure of a person left behind, and how it meets a second one (issue 25, leftovers):
each test fails without the fix it names. The interleavings reuse test_index_races' sides."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction

from governance.erasure.resume import RESUME_KIND, erasures_resume
from governance.jobs.runs import job_run
from governance.models import JobRun, PseudonymKey
from memoryapp.consolidation.fold import PLAYBOOK_PATH, fold_access, playbook_file
from memoryapp.consolidation.lineage import derived_files_forget
from memoryapp.consolidation.passes import consolidation_job
from memoryapp.content import REDACTED_TEXT
from memoryapp.errors import Conflict
from memoryapp.extraction.services import extraction_now
from memoryapp.files.services import file_put
from memoryapp.forgetting import mentions, person
from memoryapp.forgetting.person import person_erase
from memoryapp.graph.names import graph_from_names
from memoryapp.graph.services import relation_write
from memoryapp.items.rules import Scope
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import (
    ConsolidationPass,
    ConsolidationState,
    Entity,
    Entry,
    MemoryFileVersion,
    MemoryItem,
    PersonIdentifier,
    Relation,
    RunEvent,
    Thread,
    ThreadRun,
)
from memoryapp.screening.identifiers import identifiers_given
from memoryapp.subjects.erasing import erasures_marked, senders_erasing_refuse
from memoryapp.subjects.matching import PLACEHOLDER
from tests.forgetting.test_index_races import WAIT
from tests.kit.api import Caller, create_memory_file, post_entry, post_item, post_ok, post_thread, use_memory_tool
from tests.kit.consolidation import active_item, answering
from tests.kit.crypto import encrypted  # noqa: F401  (a fixture)
from tests.kit.erasing import (
    erase_with_writes_between,
    eraser_holding,
    erasure_held,
    held_by_another_process,
    writes_run,
)
from tests.kit.mentions import EMAIL, NAME, PERSON, her_thread
from tests.threads.test_run_ledger import SNAP_1

pytestmark = pytest.mark.django_db(transaction=True)  # the erasure and the writer on two connections


def test_a_second_forget_while_one_runs_answers_409_at_once_and_erases_nothing(alice: Caller) -> None:
    her_thread(alice)
    with erasure_held(alice.agent.pk):
        with connection.cursor() as cursor:
            # A bound on any wait of this connection: the forget waiting on the first erasure's lock
            # fails here instead of hanging the test (and, in the service, a web worker).
            cursor.execute("SET lock_timeout = '10s'")
        try:
            answer = alice.client.post(f"/api/v1/users/{PERSON}/forget", {}, format="json")
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    # Before: the request waited on the running erasure's lock with no bound.
    assert answer.status_code == 409, answer.content
    error = answer.json()["error"]
    assert error["code"] == "erasure_running" and error["field"] == "user_id"
    assert "already being erased" in error["message"]
    assert post_entry(alice, "t-ines", role="user", content="Still here.")["content"] == "Still here."
    # Once the first ended, the same call runs.
    done = alice.client.post(f"/api/v1/users/{PERSON}/forget", {}, format="json")
    assert done.status_code == 200, done.content
    assert done.json()["counts"]["threads"] == 1


class Killed(Exception):
    """The process running the erasure dies here (its session lock goes with its connection)."""


def _raw_values(agent_id: int) -> list[str]:
    """The registry's stored values as the database holds them (sealed or not)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT value || ' ' || lookup FROM memoryapp_personidentifier WHERE agent_id = %s", [agent_id])
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.usefixtures("encrypted")
def test_identifiers_given_only_with_an_interrupted_forget_are_used_by_its_resume(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    # Registered: her name only. Her e-mail is given with the forget alone.
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", {"names": [NAME]}, format="json")
    assert answer.status_code == 200, answer.content
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content=f"Write to {EMAIL} about the trip.")

    def killed(**_: Any) -> Any:
        raise Killed

    monkeypatch.setattr(mentions, "_mentions_erase", killed)
    given = identifiers_given({"emails": [EMAIL]}, field="identifiers")
    with pytest.raises(Killed):
        person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], mode="redact", actor="agent:alice", identifiers=given)
    monkeypatch.undo()
    [mark] = erasures_marked(user_id=PERSON)
    assert not mark.running
    # Kept for the erasure's span, sealed: neither the value nor its lookup in clear; not listed as
    # registered by the agent's GET.
    assert not any(EMAIL in raw for raw in _raw_values(alice.agent.pk))
    listed = alice.client.get(f"/api/v1/users/{PERSON}/identifiers").json()
    assert listed["emails"] == [] and listed["names"] == ["ines valdomiro"]
    # Meanwhile a write naming her by the given e-mail stores the placeholder (writers know it now).
    later = post_entry(alice, "t-carl", role="user", content=f"Or to {EMAIL} tomorrow.")
    assert later["content"] == f"Or to {PLACEHOLDER} tomorrow."

    with django_capture_on_commit_callbacks(execute=True):
        assert erasures_resume()["resumed"] == 1
    run = JobRun.objects.get(kind=RESUME_KIND)
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert EMAIL not in str(run.arguments)
    # Before: the resume knew her name only, and the turn naming her by the e-mail kept it.
    assert EMAIL not in Entry.objects.get(pk=turn["id"]).content
    assert Entry.objects.get(pk=turn["id"]).content == f"Write to {PLACEHOLDER} about the trip."
    # Dropped with the erasure.
    assert not PersonIdentifier.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def _her_files(caller: Caller) -> bool:
    return MemoryFileVersion.objects.filter(agent=caller.agent, user_id=PERSON).exists()


def _her_thread_redacted(caller: Caller) -> bool:
    return not Entry.objects.filter(
        agent=caller.agent, thread__external_id="t-ines", redacted_at__isnull=True, type="message"
    ).exists()


def test_in_redact_mode_a_turn_appended_to_her_thread_after_it_was_redacted_is_redacted_too(alice: Caller) -> None:
    her_thread(alice)
    post_thread(alice, "t-carl", user_id="u-carl")
    post_entry(alice, "t-carl", role="user", content="Carl asks about the trip.")
    # Where her thread is redacted.
    erase_with_writes_between(
        alice,
        lambda: post_entry(alice, "t-ines", role="user", content="My passport number is PX4471."),
        lambda: post_entry(alice, "t-ines", role="assistant", content="Noted: the passport."),
        when=lambda: _her_thread_redacted(alice),
        what="appends to her thread",
        mode="redact",
    )
    # Before: both turns stayed in her thread as written.
    assert not Entry.objects.filter(agent=alice.agent, content__icontains="passport").exists()
    assert _her_thread_redacted(alice)
    assert Entry.objects.get(agent=alice.agent, thread__external_id="t-carl").content == "Carl asks about the trip."
    # Once it ended, a turn of her thread is a new one, stored as any other.
    assert post_entry(alice, "t-ines", role="user", content="Hello again.")["content"] == "Hello again."


def test_in_redact_mode_what_a_run_published_to_her_thread_after_it_was_redacted_goes_too(alice: Caller) -> None:
    """Her thread gained no turn, only run events (a delta, a snapshot of the conversation): the
    last sweep took them too. Before, it looked for turns alone and left them as published."""
    her_thread(alice)
    run_id = str(post_ok(alice.client, "/api/v1/threads/t-ines/runs", {})["id"])
    said = {**SNAP_1, "messages": [{"role": "user", "content": "My passport number is PX4471."}]}
    events = [{"kind": "text_delta", "delta": "PX4471 renewed"}, {"kind": "snapshot", "snapshot": said}]
    erase_with_writes_between(
        alice,
        lambda: post_ok(alice.client, f"/api/v1/threads/t-ines/runs/{run_id}/events", {"events": events}),
        when=lambda: _her_thread_redacted(alice),
        what="publishes to her thread's run",
        mode="redact",
    )
    assert ThreadRun.objects.get(pk=run_id).snapshot is None
    assert not RunEvent.objects.filter(run_id=run_id).exists()


def test_a_thread_listing_her_as_a_participant_made_after_the_participants_step_is_refused(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", {"names": [NAME]}, format="json")
    assert answer.status_code == 200, answer.content
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"memoryUserIds": ["u-carl", PERSON]})
    post_thread(alice, "t-dora", user_id="u-dora")
    sent: list[Any] = []
    delete_entities = person.mentions_delete_entities

    def past_the_participants_step(**kwargs: Any) -> int:
        # Right after the mentions step (its transaction committed): Carl's thread lists her no more.
        assert PERSON not in Thread.objects.get(agent=alice.agent, external_id="t-carl").metadata["memoryUserIds"]
        sent.extend(
            writes_run(
                lambda: alice.client.post(
                    "/api/v1/threads",
                    {"id": "t-group", "user_id": "u-carl", "metadata": {"memoryUserIds": ["u-carl", PERSON]}},
                    format="json",
                ),
                lambda: alice.client.patch(
                    "/api/v1/threads/t-dora", {"metadata": {"memoryUserIds": ["u-dora", PERSON]}}, format="json"
                ),
                what="a thread listing her",
            )
        )
        return delete_entities(**kwargs)

    monkeypatch.setattr(person, "mentions_delete_entities", past_the_participants_step)
    person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], mode="redact", actor="agent:alice")

    assert len(sent) == 2
    for answer in sent:
        # Before: 201 and 200, and both threads listed her after her erasure.
        assert answer.status_code == 409, answer.content
        assert answer.json()["error"]["code"] == "person_being_erased"
        assert answer.json()["error"]["field"] == "metadata.memoryUserIds"
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-group").exists()
    for thread in Thread.objects.filter(agent=alice.agent):
        assert PERSON not in (thread.metadata or {}).get("memoryUserIds", []), thread.external_id


def test_items_and_facts_of_her_scope_written_after_the_items_step_are_refused(alice: Caller) -> None:
    her_thread(alice)
    post_item(alice, kind="fact", subject="Ines", attribute="city", value="Lisbon", user_id=PERSON)
    # Past its items step.
    item, fact = erase_with_writes_between(
        alice,
        lambda: alice.client.post(
            "/api/v1/items",
            {
                "kind": "fact",
                "subject": "Ines",
                "attribute": "employer",
                "value": "the harbour office",
                "user_id": PERSON,
            },
            format="json",
        ),
        lambda: alice.client.put(f"/api/v1/facts/users/{PERSON}/diet", {"value": "vegetarian"}, format="json"),
        when=lambda: not MemoryItem.objects.filter(agent=alice.agent, user_id=PERSON).exists(),
        what="memory of her scope",
    )
    # Before: 201 and 200, and both outlived her erasure (sealed under her destroyed key).
    assert item.status_code == 409 and item.json()["error"]["field"] == "user_id", item.content
    assert fact.status_code == 409 and fact.json()["error"]["field"] == "namespace", fact.content
    assert {item.json()["error"]["code"], fact.json()["error"]["code"]} == {"person_being_erased"}
    assert not MemoryItem.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert not MemoryItem.objects.filter(agent=alice.agent, namespace__startswith=f"users/{PERSON}").exists()
    # Once it ended, memory of her is new, stored as any other.
    assert post_item(alice, kind="fact", subject="Ines", attribute="city", value="Porto", user_id=PERSON)["id"]


def test_an_imported_thread_listing_her_as_a_participant_while_her_erasure_runs_is_refused(alice: Caller) -> None:
    header = {
        "type": "thread",
        "thread": {"id": "t-group", "user_id": "u-carl", "metadata": {"memoryUserIds": ["u-carl", PERSON]}},
    }
    with erasure_held(alice.agent.pk):
        answer = alice.client.post("/api/v1/threads/import", {"records": [header]}, format="json")
    # Before: 201, a thread listing her made after her erasure took her out of every list.
    assert answer.status_code == 409, answer.content
    error = answer.json()["error"]
    assert error["code"] == "person_being_erased" and error["field"] == "metadata.memoryUserIds"
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-group").exists()
    # Once it ended, the same file imports.
    assert alice.client.post("/api/v1/threads/import", {"records": [header]}, format="json").status_code == 201


def test_a_forget_while_a_write_of_her_memory_commits_erases_and_is_no_409(alice: Caller) -> None:
    her_thread(alice)

    @contextmanager
    def writing_her_memory() -> Iterator[None]:
        # A write of her memory (an item of her scope, a message of hers) holds her eraser lock
        # shared until it commits (`senders_erasing_refuse`): no erasure runs.
        with transaction.atomic():
            senders_erasing_refuse(agent_id=alice.agent.pk, senders={PERSON: "user_id"}, what="memory")
            yield

    side, release = held_by_another_process(writing_her_memory)
    # The write commits a moment after the forget asked.
    timer = threading.Timer(0.5, release.set)
    timer.start()
    try:
        answer = alice.client.post(f"/api/v1/users/{PERSON}/forget", {}, format="json")
    finally:
        release.set()
        side.join(WAIT)
        timer.cancel()
    # Before: 409 erasure_running, "already being erased" while no erasure ran, and nothing erased.
    assert answer.status_code == 200, answer.content
    assert answer.json()["counts"]["threads"] == 1
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-ines").exists()


def test_a_memory_file_of_her_scope_written_after_the_files_step_is_refused(alice: Caller) -> None:
    url = f"/api/v1/memory-tool?user_id={PERSON}"
    create_memory_file(alice, "/memories/ines.md", "Ines flies on Friday.\n", url=url)
    command = {"command": "create", "path": "/memories/ines-passport.md", "file_text": "Passport PX4471.\n"}
    # Past its files step.
    [(status, answer)] = erase_with_writes_between(
        alice,
        lambda: use_memory_tool(alice, command, url),
        when=lambda: not _her_files(alice),
        what="a file of her scope",
    )
    # Before: 201, and the file outlived her erasure, sealed under her destroyed key.
    assert status == 409, answer
    assert answer["error"]["code"] == "person_being_erased", answer
    # The memory tool's own refusal: the field, and the text a model reads as the tool's result
    # (before: no `result`, the model got a JSON error body it was never told about).
    assert answer["error"]["field"] == "user_id" and answer["result"].startswith("Error: "), answer
    assert not MemoryFileVersion.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    # Once it ended, a file of her scope is a new one, stored as any other.
    create_memory_file(alice, "/memories/ines.md", "Ines, again.\n", url=url)


def test_in_redact_mode_the_last_sweep_leaves_her_no_pseudonym_secret(alice: Caller) -> None:
    her_thread(alice)
    erase_with_writes_between(
        alice,
        lambda: post_entry(alice, "t-ines", role="user", content="My passport number is PX4471."),
        when=lambda: _her_thread_redacted(alice),
        what="appends to her thread",
        mode="redact",
    )
    assert not Entry.objects.filter(agent=alice.agent, content__icontains="passport").exists()
    # Before: the last sweep's audit record of the turn it redacted made her secret again, after
    # the erasure had deleted it: her pseudonyms in the audit trail linked to her once more.
    assert not PseudonymKey.objects.filter(agent_id=alice.agent.pk, user_id=PERSON).exists()


def test_her_thread_given_to_another_person_while_her_erasure_runs_is_refused(alice: Caller) -> None:
    her_thread(alice)
    with erasure_held(alice.agent.pk):
        answer = alice.client.patch("/api/v1/threads/t-ines", {"user_id": "u-carl"}, format="json")
    # Before: 200, and her thread, now Carl's, was out of her erasure's reach (its step takes the
    # threads about her): her words outlived it.
    assert answer.status_code == 409, answer.content
    error = answer.json()["error"]
    assert error["code"] == "person_being_erased" and error["field"] == "user_id"
    assert Thread.objects.get(agent=alice.agent, external_id="t-ines").user_id == PERSON
    # Once it ended, a thread may change hands as before.
    post_thread(alice, "t-dora", user_id="u-dora")
    moved = alice.client.patch("/api/v1/threads/t-dora", {"user_id": "u-carl"}, format="json")
    assert moved.status_code == 200, moved.content


def _edge_of_her_scope(caller: Caller) -> str:
    """An edge of the graph in her scope, as extraction writes one (in its window's transaction):
    what became of it, or the refusal's code and field."""
    try:
        with transaction.atomic():
            relation_write(
                agent=caller.agent, subject="Ines", predicate="works at", object="Harbour Office", scope=Scope(PERSON)
            )
    except Conflict as refused:
        return f"{refused.code}:{refused.field}"
    return "written"


def test_a_graph_edge_of_her_scope_written_after_the_entities_step_is_refused(alice: Caller) -> None:
    create_memory_file(
        alice, "/memories/ines.md", "Ines flies on Friday.\n", url=f"/api/v1/memory-tool?user_id={PERSON}"
    )
    with transaction.atomic():
        relation_write(agent=alice.agent, subject="Ines", predicate="lives in", object="Lisbon", scope=Scope(PERSON))

    def edge_past_the_entities_step() -> str:
        assert not Entity.objects.filter(agent=alice.agent, user_id=PERSON).exists()
        return _edge_of_her_scope(alice)

    # Her files went at the step after her entities: the first batch past it.
    sent = erase_with_writes_between(
        alice, edge_past_the_entities_step, when=lambda: not _her_files(alice), what="an edge of her scope"
    )
    # Before: written, and the edge and its two entities ("Ines", "Harbour Office") outlived her
    # erasure in her scope, the names sealed under her destroyed key.
    assert sent == ["person_being_erased:user_id"]
    assert not Entity.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert not Relation.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    # Once it ended, an edge of her scope is a new one.
    assert _edge_of_her_scope(alice) == "written"


def test_the_rule_based_graph_of_her_thread_while_her_erasure_runs_is_refused(alice: Caller) -> None:
    her_thread(alice, "I met Carla and Bruno at the Harbour Office.")
    thread = Thread.objects.get(agent=alice.agent, external_id="t-ines")
    # Before: written (the entities and edges of her scope outliving her erasure's entities step).
    with erasure_held(alice.agent.pk), pytest.raises(Conflict) as refused:
        graph_from_names(thread=thread)
    assert refused.value.code == "person_being_erased" and refused.value.field == "user_id"
    assert not Entity.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert not Relation.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    # Once it ended, it is written as any other.
    assert graph_from_names(thread=thread) > 0


def test_her_playbook_losing_a_purged_lesson_while_her_erasure_runs_is_deleted_not_refused(alice: Caller) -> None:
    """A cascade purging a lesson her playbook names (retention, another thread's forget) while her
    erasure runs: the playbook was written again without the rule, a version with content in her
    scope, refused (409), and the cascade failed with it. It only removes: the playbook goes."""
    scope = Scope(user_id=PERSON)
    access = fold_access(agent=alice.agent, scope=scope)
    file_put(access=access, path=PLAYBOOK_PATH, text=playbook_file(["Be brief. [lesson:l-1]", "Be kind. [lesson:l-2]"]))
    carl = fold_access(agent=alice.agent, scope=Scope(user_id="u-carl"))
    file_put(access=carl, path=PLAYBOOK_PATH, text=playbook_file(["Be brief. [lesson:l-1]", "Be kind. [lesson:l-3]"]))
    with erasure_held(alice.agent.pk), transaction.atomic():  # the cascade's
        report = derived_files_forget(agent=alice.agent, item_ids=["l-1"])
    assert report.playbook_rules_removed == 2 and report.versions_redacted == 2
    hers = MemoryFileVersion.objects.filter(agent=alice.agent, user_id=PERSON, path=PLAYBOOK_PATH)
    # Nothing of hers written: her playbook's one version redacted, then deleted.
    assert [(v.content, v.redacted_at is not None) for v in hers.order_by("sequence")] == [
        (REDACTED_TEXT, True),
        (None, False),
    ]
    # Another person's playbook is written again without the rule, as before.
    carls = MemoryFileVersion.objects.filter(agent=alice.agent, user_id="u-carl", path=PLAYBOOK_PATH)
    assert [v.redacted_at is not None for v in carls.order_by("sequence")] == [True, False]
    text = carls.order_by("-sequence").first().content
    assert "Be kind. [lesson:l-3]" in text and "l-1" not in text


def test_the_identifiers_counted_are_those_she_registered_not_those_given_with_the_erasure(alice: Caller) -> None:
    post_thread(alice, "t-ines", user_id=PERSON)
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", {"names": [NAME]}, format="json")
    assert answer.status_code == 200, answer.content
    given = identifiers_given({"emails": [EMAIL]}, field="identifiers")
    counts = person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], identifiers=given, actor="agent:alice")
    # Before: 2, the e-mail kept for the erasure's span counted as an identifier of hers it erased.
    assert counts["identifiers"] == 1, counts
    assert not PersonIdentifier.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def test_a_forget_keeping_mentions_interrupted_is_marked_and_resumed(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", {"names": [NAME]}, format="json")
    assert answer.status_code == 200, answer.content
    her_thread(alice)
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content="Ines Valdomiro booked the flights.")

    def killed(**_: Any) -> Any:
        raise Killed

    monkeypatch.setattr(person, "_threads_erase", killed)
    with pytest.raises(Killed):
        person_erase(user_id=PERSON, agent_ids=[alice.agent.pk], actor="agent:alice", mentions="keep")
    monkeypatch.undo()
    # Before: no mark (every table's mentions kept), so nothing showed it interrupted and the beat
    # never finished it: her thread stayed.
    [mark] = erasures_marked(user_id=PERSON)
    assert not mark.running and mark.mode == "erase"
    # Writers keep naming her as written meanwhile (her mentions are kept).
    later = post_entry(alice, "t-carl", role="user", content="Ines Valdomiro again.")
    assert later["content"] == "Ines Valdomiro again."

    with django_capture_on_commit_callbacks(execute=True):
        assert erasures_resume()["resumed"] == 1
    run = JobRun.objects.get(kind=RESUME_KIND)
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-ines").exists()
    # Resumed as asked: mentions kept.
    assert Entry.objects.get(pk=turn["id"]).content == "Ines Valdomiro booked the flights."
    assert not PersonIdentifier.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert erasures_marked(user_id=PERSON) == []


@pytest.mark.parametrize("begins", ["before the job", "while the model answers"])
def test_an_extraction_of_her_thread_while_her_erasure_runs_is_skipped_and_writes_nothing(
    alice: Caller, begins: str
) -> None:
    her_thread(alice, "I work at the Harbour Office now.")
    thread = Thread.objects.get(agent=alice.agent, external_id="t-ines")
    quote = [{"message": 1, "quote": "I work at the Harbour Office"}]
    answer = json.dumps(
        [
            {"kind": "fact", "subject": "user", "attribute": "employer", "value": "Harbour Office", "evidence": quote},
            {
                "kind": "relation",
                "subject": "user",
                "predicate": "works at",
                "object": "Harbour Office",
                "evidence": quote,
                "confidence": 0.9,
            },
        ]
    )
    erasers: list[tuple[threading.Thread, threading.Event]] = []

    def answering_as_she_goes(system: str, messages: list[Any]) -> str:
        erasers.append(eraser_holding(alice.agent.pk))
        return answer

    if begins == "before the job":
        erasers.append(eraser_holding(alice.agent.pk))
    model = ScriptedModel([answer] if erasers else answering_as_she_goes)
    try:
        with use_model(model):
            # Before: the item's refusal (409) failed the run, and raised here.
            run, outcome = extraction_now(thread=thread)
    finally:
        for side, release in erasers:
            release.set()
            side.join(WAIT)
    assert len(erasers) == 1
    assert run.status == JobRun.Status.SKIPPED and outcome is None, (run.status, run.error)
    assert "being erased" in run.result["skipped"] and PERSON not in json.dumps(run.result)
    # Her thread goes with her erasure: nothing asked of the model when it ran already.
    assert len(model.calls) == (0 if begins == "before the job" else 1)
    for rows in (MemoryItem.objects, Entity.objects, Relation.objects):
        assert not rows.filter(agent=alice.agent, user_id=PERSON).exists()
    thread.refresh_from_db()
    assert not (thread.extraction or {}).get("through_seq")  # the mark did not move


def test_an_extraction_skipped_during_a_redaction_says_what_becomes_of_her_thread(alice: Caller) -> None:
    """In `redact` mode her thread stays, its turns redacted: the skip's reason said the thread
    goes with the erasure, true of `erase` only."""
    her_thread(alice, "I work at the Harbour Office now.")
    thread = Thread.objects.get(agent=alice.agent, external_id="t-ines")
    model = ScriptedModel(["[]"])
    with use_model(model):
        [(run, outcome)] = erase_with_writes_between(
            alice, lambda: extraction_now(thread=thread), when=lambda: True, what="extracts her thread", mode="redact"
        )
    assert run.status == JobRun.Status.SKIPPED and outcome is None and model.calls == []
    assert Thread.objects.filter(pk=thread.pk).exists() and _her_thread_redacted(alice)
    reason = run.result["skipped"]
    # Before: "the thread goes with the erasure", false of a redaction.
    assert "being erased" in reason and "redacts" in reason and "goes with" not in reason
    assert PERSON not in json.dumps(run.result)


def test_a_consolidation_pass_skips_her_scope_while_her_erasure_runs_and_does_the_others(alice: Caller) -> None:
    for user_id, name in ((PERSON, "Ines"), ("u-carl", "Carl")):
        for attribute, value in (("diet", "vegetarian"), ("city", "Porto"), ("job", "nurse")):
            active_item(agent=alice.agent, subject=name, attribute=attribute, value=value, user_id=user_id)

    def cite_all(shown: str) -> Any:
        ids = re.findall(r"\[item:([a-z0-9_]+)\]", shown)
        return [{"text": "Eats no meat, lives in Porto. " + " ".join(f"[item:{i}]" for i in ids)}]

    model = answering(cite_all)
    run = JobRun.objects.create(kind="consolidation", agent_id=alice.agent.pk, arguments={"agent_id": alice.agent.pk})
    with erasure_held(alice.agent.pk), use_model(model):
        job_run(run.pk, lambda r: consolidation_job(r, ConsolidationPass.OBSERVATIONS))
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    # Before: her scope was worked on too (a model call about her facts, its file refused, her
    # scope's consolidation record written while her erasure ran, the run naming her pseudonym).
    assert len(model.calls) == 1 and "Carl" in str(model.calls[0])
    assert run.result["scopes_skipped"] == 1 and [s["person"] != "" for s in run.result["scopes"]] == [True]
    assert not MemoryFileVersion.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert MemoryFileVersion.objects.filter(agent=alice.agent, user_id="u-carl").exists()
    assert not ConsolidationState.objects.filter(agent=alice.agent, user_id=PERSON).exists()
