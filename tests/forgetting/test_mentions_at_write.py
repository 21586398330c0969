"""Mentions found at write time (issue 25 §2): once a person is registered, every write that names
her records it in the subject index in its own transaction, exactly as the rebuild would, without
waiting for the rebuild job; an agent without registered people pays nothing."""

from __future__ import annotations

from typing import Any

from memoryapp.models import Agent, SubjectMention
from memoryapp.subjects.index import mentions_scan, person_matcher
from tests.kit.api import Caller, post_entry, post_thread
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.mentions import CARL_SAYS, EMAIL, IDENTIFIERS, NAME, PERSON, plant


def _indexed(agent: Agent, user_id: str = PERSON) -> set[tuple[str, str]]:
    return set(SubjectMention.objects.filter(agent=agent, user_id=user_id).values_list("table", "row_id"))


def _register(caller: Caller, user_id: str, identifiers: dict[str, list[str]]) -> None:
    answer = caller.client.put(f"/api/v1/users/{user_id}/identifiers", identifiers, format="json")
    assert answer.status_code == 200, answer.content


def test_every_write_naming_a_registered_person_is_indexed_as_the_rebuild_would(alice: Caller) -> None:
    _register(alice, PERSON, IDENTIFIERS)
    SubjectMention.objects.all().delete()  # whatever a job may have found: only the writes below count

    plant(alice)

    at_write = _indexed(alice.agent)
    scanned = mentions_scan(agent_id=alice.agent.pk, matcher=person_matcher(agent_id=alice.agent.pk, user_id=PERSON))
    # Job records (the rebuild job's own arguments) are the job's part, not a write's.
    rebuilt = {(table, row_id) for table, ids in scanned.items() if table != "job_run" for row_id in ids}
    assert at_write == rebuilt
    assert {table for table, _ in at_write} == {"entry", "thread", "item", "entity", "file_version"}
    # The fork's copied metadata, the fact and the context document among them.
    assert len([1 for table, _ in at_write if table == "thread"]) == 3  # t-carl, t-team, its fork
    assert len([1 for table, _ in at_write if table == "file_version"]) == 2


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
