"""The subject index follows the entities it names (issue 25 §2): a merge of two entities, and every
operation that deletes entities, leaves the index saying what the rebuild finds, in the same
transaction, and no row of it names an entity that is gone (a read of the index would answer a
deleted id for the person: the merged entity's, while the one kept holds her name)."""

from __future__ import annotations

import pytest
from django.db import connection

from memoryapp.graph.services import entity_merge
from memoryapp.models import Agent, Entity, Entry, MemoryItem, SubjectMention, ThreadRun
from memoryapp.subjects.index import mentions_of, mentions_scan, person_matcher, table_rows
from tests.kit.api import Caller, create_memory_file, post_entry, post_item, post_ok, post_thread
from tests.kit.mentions import EMAIL, IDENTIFIERS, NAME, PERSON
from tests.threads.test_run_ledger import SNAP_1, publish, started

DORA = "u-dora"
DORA_NAME = "Dora Lima"


def _register(caller: Caller) -> None:
    for user_id, identifiers in ((PERSON, IDENTIFIERS), (DORA, {"names": [DORA_NAME]})):
        answer = caller.client.put(f"/api/v1/users/{user_id}/identifiers", identifiers, format="json")
        assert answer.status_code == 200, answer.content


def _about(caller: Caller, subject: str, attribute: str, value: str, **scope: str) -> Entity:
    """An item about `subject` (the entity of that name is made with it): the rows about the entity."""
    item = post_item(caller, kind="fact", subject=subject, attribute=attribute, value=value, **scope)
    return Entity.objects.get(pk=MemoryItem.objects.get(pk=item["id"]).entity_id)


def _indexed(agent: Agent, user_id: str) -> set[tuple[str, str]]:
    return set(SubjectMention.objects.filter(agent=agent, user_id=user_id).values_list("table", "row_id"))


def _rebuilt(agent: Agent, user_id: str) -> set[tuple[str, str]]:
    scanned = mentions_scan(agent_id=agent.pk, matcher=person_matcher(agent_id=agent.pk, user_id=user_id))
    return {(table, row_id) for table, ids in scanned.items() for row_id in ids}


def _assert_index_true(agent: Agent) -> None:
    """For each registered person, the index holds what the rebuild finds; no row names a gone entity."""
    for user_id in (PERSON, DORA):
        assert _indexed(agent, user_id) == _rebuilt(agent, user_id), user_id
    named = SubjectMention.objects.filter(agent=agent, table=SubjectMention.Table.ENTITY).values_list(
        "row_id", flat=True
    )
    assert set(named) <= set(Entity.objects.filter(agent=agent).values_list("pk", flat=True))


@pytest.mark.parametrize(
    ("keep_name", "merged_name", "people"),
    [
        ("the organiser", NAME, {PERSON}),  # the merged entity names her, the kept one nobody
        (NAME, DORA_NAME, {PERSON, DORA}),  # each linked to another person
        (NAME, EMAIL, {PERSON}),  # both linked to her: one index row of the kept entity, not two
    ],
)
def test_a_merge_points_the_index_at_the_entity_kept(
    alice: Caller, keep_name: str, merged_name: str, people: set[str]
) -> None:
    _register(alice)
    keep = _about(alice, keep_name, "role", "books the hotels")
    merged = _about(alice, merged_name, "phone", "ask at the desk")
    entity_row = (SubjectMention.Table.ENTITY, merged.pk)
    assert any(entity_row in _indexed(alice.agent, p) for p in people)  # written, so found at write

    entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")

    _assert_index_true(alice.agent)
    for user_id in people:
        assert (SubjectMention.Table.ENTITY, keep.pk) in _indexed(alice.agent, user_id)
        assert merged.pk not in mentions_of(agent_ids=[alice.agent.pk], user_id=user_id)[alice.agent.pk]["entity"]
    # The rows about the merged entity are about the one kept, which now holds her name.
    assert set(MemoryItem.objects.filter(agent=alice.agent).values_list("entity_id", flat=True)) == {keep.pk}


def test_her_erasure_after_a_merge_takes_the_items_about_her_entity_and_her_name_from_the_one_kept(
    alice: Caller,
) -> None:
    _register(alice)
    keep = _about(alice, "the organiser", "role", "books the hotels")
    merged = _about(alice, NAME, "phone", "ask at the desk")
    entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")

    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {}, status=200)

    keep.refresh_from_db()
    assert NAME not in keep.aliases
    assert not MemoryItem.objects.filter(agent=alice.agent, subject=NAME).exists()
    assert MemoryItem.objects.filter(agent=alice.agent, subject="the organiser").exists()
    assert not SubjectMention.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    _assert_index_true(alice.agent)


def _entity_of_both(caller: Caller, **scope: str) -> Entity:
    return _about(caller, f"{NAME} and {DORA_NAME}", "met", "in Porto", **scope)


def test_her_erasure_deleting_an_entity_naming_her_and_dora_drops_doras_row_of_it(alice: Caller) -> None:
    _register(alice)
    both = _entity_of_both(alice)
    assert (SubjectMention.Table.ENTITY, both.pk) in _indexed(alice.agent, DORA)

    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {}, status=200)

    assert not Entity.objects.filter(pk=both.pk).exists()
    _assert_index_true(alice.agent)


def test_a_thread_deleted_with_its_entities_leaves_no_index_row_of_them(alice: Caller) -> None:
    _register(alice)
    post_thread(alice, "t-carl", user_id="u-carl")
    post_entry(alice, "t-carl", role="user", content="We talked about the trip.")
    both = _entity_of_both(alice, thread_id="t-carl")

    answer = alice.client.delete("/api/v1/threads/t-carl")
    assert answer.status_code in (200, 204), answer.content

    assert not Entity.objects.filter(pk=both.pk).exists()
    _assert_index_true(alice.agent)


def test_the_persons_erasure_deleting_her_entities_drops_the_index_rows_naming_others(alice: Caller) -> None:
    _register(alice)
    both = _entity_of_both(alice, user_id=PERSON)  # in her scope: hers, naming Dora too

    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {"mentions": "keep"}, status=200)

    assert not Entity.objects.filter(pk=both.pk).exists()
    _assert_index_true(alice.agent)


def test_an_entity_left_without_items_when_its_quote_goes_leaves_no_index_row(alice: Caller) -> None:
    _register(alice)
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content=f"{NAME} and {DORA_NAME} met in Porto.")
    item = post_item(
        alice,
        kind="fact",
        subject=f"{NAME} and {DORA_NAME}",
        attribute="met",
        value="in Porto",
        user_id="u-carl",
        evidence=[{"entry_id": turn["id"], "quote": "met in Porto"}],
    )
    entity_id = MemoryItem.objects.get(pk=item["id"]).entity_id

    answer = alice.client.delete(f"/api/v1/entries/{turn['id']}")
    assert answer.status_code in (200, 204), answer.content

    assert not MemoryItem.objects.filter(pk=item["id"]).exists()
    assert not Entity.objects.filter(pk=entity_id).exists()
    _assert_index_true(alice.agent)


def test_every_table_of_the_index_takes_its_mentions_with_a_deleted_row(db: None) -> None:
    """A table added to the index without its trigger would leave rows naming deleted ids again."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgargs FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname LIKE %s",
            ["%_subject_mentions_gone"],
        )
        triggers = {relname: bytes(args).rstrip(b"\x00").decode() for relname, args in cursor.fetchall()}
    tables = SubjectMention.Table.values
    assert triggers == {table_rows(t, agent_id=0, row_ids=[]).model._meta.db_table: t for t in tables}


# A row that stays but no longer says what it said (a redaction) is not a DELETE: no trigger sees it,
# so the code that rewrites it says what the index holds of it now.


def test_a_redacted_turn_naming_her_leaves_no_index_row(alice: Caller) -> None:
    _register(alice)
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content=f"Please call {NAME} or {DORA_NAME} about the trip.")
    assert (SubjectMention.Table.ENTRY, turn["id"]) in _indexed(alice.agent, PERSON) & _indexed(alice.agent, DORA)

    post_ok(alice.client, f"/api/v1/entries/{turn['id']}/redact", {"reason": "pasted by mistake"}, status=200)

    assert Entry.objects.get(pk=turn["id"]).redacted_at is not None
    _assert_index_true(alice.agent)


def test_a_redact_erasure_of_ana_leaves_no_index_row_of_what_it_redacted_naming_dora(alice: Caller) -> None:
    """Ana's turn, memory file and run snapshot name Dora; Ana's erasure in `redact` mode keeps her
    thread, file history and run, and empties them: Dora's rows of the index of them go."""
    _register(alice)
    run_id = started(alice)  # Ana's thread t-run
    turn = post_entry(alice, "t-run", role="user", content=f"{DORA_NAME} books the hotels.")
    create_memory_file(alice, "/memories/trip.md", f"Ask {DORA_NAME} about the hotels.")
    said = {**SNAP_1, "messages": [{"role": "user", "content": f"{DORA_NAME} books the hotels."}]}
    publish(alice, run_id, {"kind": "snapshot", "snapshot": said})
    tables = {table for table, _ in _indexed(alice.agent, DORA)}
    assert {SubjectMention.Table.ENTRY, SubjectMention.Table.FILE_VERSION, SubjectMention.Table.THREAD_RUN} <= tables

    post_ok(alice.client, "/api/v1/users/u-ana/forget", {"mode": "redact", "mentions": "keep"}, status=200)

    assert Entry.objects.get(pk=turn["id"]).redacted_at is not None
    assert ThreadRun.objects.get(pk=run_id).snapshot is None
    _assert_index_true(alice.agent)
