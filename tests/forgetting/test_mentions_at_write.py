"""Mentions found at write time (issue 25 §2): once a person is registered, every write that names
her records it in the subject index in its own transaction, exactly as the rebuild would, without
waiting for the rebuild job; an agent without registered people pays nothing."""

from __future__ import annotations

from typing import Any

from governance.jobs.runs import job_run
from governance.models import JobRun
from memoryapp.graph.services import relation_write
from memoryapp.models import Agent, Entity, Entry, SubjectMention
from memoryapp.subjects.index import mentions_scan, person_matcher
from tests.kit.api import Caller, post_entry, post_ok, post_thread
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.mentions import CARL_SAYS, EMAIL, IDENTIFIERS, NAME, PERSON, PHONE, plant
from tests.kit.review_staff import food_talk, staff, suggest
from tests.threads.test_run_ledger import SNAP_1


def _indexed(agent: Agent, user_id: str = PERSON) -> set[tuple[str, str]]:
    return set(SubjectMention.objects.filter(agent=agent, user_id=user_id).values_list("table", "row_id"))


def _register(caller: Caller, user_id: str, identifiers: dict[str, list[str]]) -> None:
    answer = caller.client.put(f"/api/v1/users/{user_id}/identifiers", identifiers, format="json")
    assert answer.status_code == 200, answer.content


def _plant_the_rest(caller: Caller, turn_id: str) -> None:
    """Her mentions in what the writes of `plant` do not reach: an item's and an edge's quote of
    Carl's turn, a knowledge document, the run ledger of Carl's thread (events and snapshot), staff's edits (an
    entity's aliases, a reviewer's edited value) and a job's result."""
    turn = Entry.objects.get(pk=turn_id)
    agent = Agent.objects.get(pk=caller.agent.pk)  # as a request reads it: with its registry's version
    relation_write(
        agent=agent,
        subject="Carl",
        predicate="asks about",
        object="Lisbon trip",
        evidence=[{"entry_id": turn.pk, "quote": turn.text}],
    )
    suggest(agent, turn, subject="Carl", attribute="trip", value="asks", user_id="u-carl", quote=turn.text)
    post_ok(caller.client, "/api/v1/knowledge", {"name": "bookings.md", "content": f"Ask {NAME} before paying."})
    run_id = post_ok(caller.client, "/api/v1/threads/t-carl/runs", {})["id"]
    said = {**SNAP_1, "messages": [{"role": "user", "content": f"Is {EMAIL} still right?"}]}
    post_ok(
        caller.client,
        f"/api/v1/threads/t-carl/runs/{run_id}/events",
        {"events": [{"kind": "text_delta", "delta": f"I will call {PHONE}"}, {"kind": "snapshot", "snapshot": said}]},
    )
    reviewer = staff("reviewer", name="rita")
    _, answer = food_talk(agent, external_id="t-food")
    item = suggest(agent, answer)
    done = reviewer.post(
        f"/admin/memoryapp/memoryitem/{item.pk}/decide/",
        {"action": "approve", "item": item.pk, "value": f"vegetarian, like {NAME}"},
    )
    assert done.status_code == 302
    entity = Entity.objects.get(agent=caller.agent, name="Lisbon trip")
    edited = staff(superuser=True, name="sam").post(
        f"/admin/memoryapp/entity/{entity.pk}/change/", {"name": "Lisbon trip", "aliases": f'["{NAME} trip"]'}
    )
    assert edited.status_code == 302, edited.content
    run = JobRun.objects.create(kind="compaction", agent_id=caller.agent.pk, arguments={})
    job_run(run.pk, lambda run: {"summary": f"{NAME} asked for the tickets"})


def test_every_write_naming_a_registered_person_is_indexed_as_the_rebuild_would(alice: Caller) -> None:
    _register(alice, PERSON, IDENTIFIERS)
    SubjectMention.objects.all().delete()  # whatever a job may have found: only the writes below count

    planted = plant(alice)
    _plant_the_rest(alice, planted["turn"]["id"])

    at_write = _indexed(alice.agent)
    scanned = mentions_scan(agent_id=alice.agent.pk, matcher=person_matcher(agent_id=alice.agent.pk, user_id=PERSON))
    rebuilt = {(table, row_id) for table, ids in scanned.items() for row_id in ids}
    assert at_write == rebuilt
    assert {table for table, _ in at_write} == set(SubjectMention.Table.values)  # every table of the index
    # The fork's copied metadata, the fact and the context document among them.
    assert len([1 for table, _ in at_write if table == "thread"]) == 3  # t-carl, t-team, its fork
    assert len([1 for table, _ in at_write if table == "file_version"]) == 2
    assert len([1 for table, _ in at_write if table in ("run_event", "thread_run")]) == 3  # 2 events, the run


def test_a_turn_that_names_nobody_registered_is_not_indexed(alice: Caller) -> None:
    _register(alice, PERSON, IDENTIFIERS)
    post_thread(alice, "t-carl", user_id="u-carl")
    quiet = post_entry(alice, "t-carl", role="user", content=CARL_SAYS)
    loud = post_entry(alice, "t-carl", role="user", content=f"Ask INES VALDOMIRO, or write to {EMAIL.upper()}.")
    assert _indexed(alice.agent) == {("entry", loud["id"])}
    assert ("entry", quiet["id"]) not in _indexed(alice.agent)


def test_a_change_of_identifiers_reaches_the_next_write(alice: Caller) -> None:
    post_thread(alice, "t-carl", user_id="u-carl")
    _register(alice, PERSON, {"names": ["Someone Else"]})
    before = post_entry(alice, "t-carl", role="user", content=f"{NAME} called.")
    _register(alice, PERSON, IDENTIFIERS)  # the version bumps: the matcher is built again
    after = post_entry(alice, "t-carl", role="user", content=f"{NAME} called again.")
    _register(alice, "u-dora", {"names": ["Dora Lima"]})
    both = post_entry(alice, "t-carl", role="user", content=f"{NAME} and Dora Lima met.")

    assert ("entry", before["id"]) not in _indexed(alice.agent)  # the rebuild job's part
    assert {("entry", after["id"]), ("entry", both["id"])} <= _indexed(alice.agent)
    assert _indexed(alice.agent, "u-dora") == {("entry", both["id"])}
    _register(alice, PERSON, {})  # she is no longer registered: later writes naming her are not indexed
    gone = post_entry(alice, "t-carl", role="user", content=f"{NAME} left.")
    assert ("entry", gone["id"]) not in _indexed(alice.agent)


def test_another_agents_people_are_never_looked_for(alice: Caller, bob: Caller) -> None:
    _register(alice, PERSON, IDENTIFIERS)
    post_thread(bob, "t-bob", user_id="u-bob")
    post_entry(bob, "t-bob", role="user", content=f"{NAME} ({EMAIL}) is my neighbour.")
    assert not SubjectMention.objects.filter(agent=bob.agent).exists()
    assert Agent.objects.get(pk=bob.agent.pk).people_version == 0


def test_an_agent_without_people_writes_no_index_row_and_no_query_for_it(
    alice: Caller, django_assert_max_num_queries: Any
) -> None:
    post_thread(alice, "t-carl", user_id="u-carl")
    post_entry(alice, "t-carl", role="user", content="warm up")
    with django_assert_max_num_queries(6):  # as tests/api/test_query_counts.py pins an append
        post_entry(alice, "t-carl", role="user", content=f"{NAME} ({EMAIL}) called.")
    assert not SubjectMention.objects.exists()


def test_with_encryption_on_the_sealed_identifiers_are_matched(
    encrypted: Any,  # noqa: F811  (the fixture imported above; first, so it is torn down after the database)
    alice: Caller,
) -> None:
    _register(alice, PERSON, IDENTIFIERS)
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"contact": EMAIL})
    turn = post_entry(alice, "t-carl", role="user", content="Please call +351 912 345 678 tomorrow.")
    assert ("entry", turn["id"]) in _indexed(alice.agent)
    assert len([1 for table, _ in _indexed(alice.agent) if table == "thread"]) == 1
