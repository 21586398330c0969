"""Writes while a person is being erased (memoryapp.subjects.erasing): once her erasure's mark is
committed, every write path naming her stores the erasure's placeholder instead of her
identifiers, records no mention of her and seals nothing under her key; the groups the officer
excluded keep what was written. The interleavings with the erasure itself are in
test_index_races.py."""

from __future__ import annotations

import threading

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.utils import timezone

from governance import locks
from governance.crypto.fields import KeyPeopleField
from memoryapp.forgetting.mentions import GROUPS, mentions_erase
from memoryapp.graph.services import entity_merge
from memoryapp.models import Agent, Entity, Entry, ErasureMark, MemoryFileVersion, MemoryItem, SubjectMention
from memoryapp.models.items import name_normalized
from memoryapp.subjects.erasing import erasing_mark
from memoryapp.subjects.index import mentions_scan, person_matcher
from memoryapp.subjects.matching import PLACEHOLDER
from tests.forgetting.test_index_races import WAIT, Side, _until
from tests.forgetting.test_mentions_at_write import _plant_the_rest
from tests.kit.api import Caller, create_memory_file, post_entry, post_item, post_ok, post_thread
from tests.kit.crypto import encrypted  # noqa: F401  (a fixture)
from tests.kit.mentions import IDENTIFIERS, NAME, PERSON, plant

pytestmark = pytest.mark.django_db(transaction=True)  # the mark is committed, as writers read it
Table = SubjectMention.Table


def _register(caller: Caller, identifiers: dict[str, list[str]] = IDENTIFIERS, user_id: str = PERSON) -> None:
    answer = caller.client.put(f"/api/v1/users/{user_id}/identifiers", identifiers, format="json")
    assert answer.status_code == 200, answer.content


def _naming_her(agent_id: int) -> set[tuple[str, str]]:
    found = mentions_scan(agent_id=agent_id, matcher=person_matcher(agent_id=agent_id, user_id=PERSON))
    return {(table, row_id) for table, ids in found.items() for row_id in ids}


def _key_sealed_by_her() -> int:
    total = 0
    for model in apps.get_models():
        if any(isinstance(f, KeyPeopleField) for f in model._meta.concrete_fields):
            total += model._default_manager.filter(key_people__contains=[PERSON]).count()
    return total


def test_every_write_path_naming_her_while_she_is_marked_stores_the_placeholder(alice: Caller) -> None:
    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())

    planted = plant(alice)
    _plant_the_rest(alice, planted["turn"]["id"])

    # Before: every table of the index named her (test_mentions_at_write plants the same).
    assert _naming_her(alice.agent.pk) == set()
    assert not SubjectMention.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert _key_sealed_by_her() == 0
    assert planted["turn"]["content"].count(PLACEHOLDER) == 3


def test_a_group_the_erasure_keeps_keeps_what_is_written_and_its_mention(alice: Caller) -> None:
    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=[Table.FILE_VERSION])
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content=f"Please call {NAME}.")
    create_memory_file(alice, "/memories/contacts.md", f"Organiser: {NAME}\n")

    assert turn["content"] == f"Please call {PLACEHOLDER}."
    version = MemoryFileVersion.objects.get(agent=alice.agent, path="/memories/contacts.md")
    assert NAME in (version.content or "")
    assert set(SubjectMention.objects.filter(agent=alice.agent, user_id=PERSON).values_list("table", "row_id")) == {
        (Table.FILE_VERSION, str(version.pk))
    }


def test_a_replacement_of_her_identifiers_while_she_is_marked_keeps_the_mark(alice: Caller) -> None:
    _register(alice, {"names": [NAME]})
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())
    _register(alice)  # e-mail and phone added: rows written anew

    assert ErasureMark.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    post_thread(alice, "t-carl", user_id="u-carl")
    # Before: the new rows had no mark, and the turn kept her name.
    assert post_entry(alice, "t-carl", role="user", content=f"Please call {NAME}.")["content"] == (
        f"Please call {PLACEHOLDER}."
    )


def test_an_erasure_that_keeps_every_mention_marks_no_one(alice: Caller) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    mentions_erase(agent_id=agent.pk, matcher=person_matcher(agent_id=agent.pk, user_id=PERSON), exclude=set(GROUPS))
    assert not ErasureMark.objects.filter(agent=agent, user_id=PERSON).exists()
    post_thread(alice, "t-carl", user_id="u-carl")
    assert NAME in post_entry(alice, "t-carl", role="user", content=f"Please call {NAME}.")["content"]


def test_only_writes_naming_her_wait_for_her_mark(alice: Caller) -> None:
    _register(alice)
    _register(alice, {"names": ["Dora Lima"]}, user_id="u-dora")
    post_thread(alice, "t-carl", user_id="u-carl")
    post_thread(alice, "t-eve", user_id="u-eve")
    post_thread(alice, "t-fay", user_id="u-fay")
    commit = threading.Event()
    marked = threading.Event()

    def marking() -> None:
        # Her erasure's mark, as `erasing_mark` writes it, its transaction held open.
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(%s, %s)", [locks.ERASING, locks.person(alice.agent.pk, PERSON)]
                )
            ErasureMark.objects.create(agent=alice.agent, user_id=PERSON, since=timezone.now(), keeps=[])
            marked.set()
            assert commit.wait(WAIT)

    mark = Side(marking, "mark")
    assert marked.wait(WAIT)
    # Writes naming no one, or another registered person, go through while the mark is being written.
    quiet = post_entry(alice, "t-eve", role="user", content="Book the train for Friday.")
    dora = post_entry(alice, "t-fay", role="user", content="Ask Dora Lima about Friday.")
    assert dora["content"] == "Ask Dora Lima about Friday."
    # One naming her waits for it (before: it took no lock), then reads it.
    writer = Side(lambda: post_entry(alice, "t-carl", role="user", content=f"Please call {NAME}."), "writer")
    _until(lambda: writer.waits_on(mark), "the write naming her waited on the mark")
    commit.set()
    mark.join()
    writer.join()
    assert not mark.errors and not writer.errors, (mark.errors, writer.errors)
    assert writer.answer["content"] == f"Please call {PLACEHOLDER}."
    assert quiet["content"] == "Book the train for Friday."
    assert set(SubjectMention.objects.filter(agent=alice.agent).values_list("user_id", "row_id")) == {
        ("u-dora", dora["id"])
    }


def test_a_retried_append_naming_her_while_she_is_marked_answers_the_entry_already_there(alice: Caller) -> None:
    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())
    post_thread(alice, "t-carl", user_id="u-carl")
    url = "/api/v1/threads/t-carl/entries"
    body = {"role": "user", "content": f"Please call {NAME}.", "created_at": "2026-03-01T10:00:00.123Z"}
    made = post_ok(alice.client, url, body, status=201)
    assert made["content"] == f"Please call {PLACEHOLDER}."
    # The response lost, the client sends the same turn again (000 `SessionDag.append`): the node
    # stored is that turn as the erasure left it. Before: its hash was of the turn naming her, the
    # retry's of the turn as sent; a second node was written.
    again = post_ok(alice.client, url, body, status=200)
    assert again["id"] == made["id"]
    assert Entry.objects.filter(agent=alice.agent, thread__external_id="t-carl").count() == 1


def test_two_items_about_her_while_she_is_marked_are_both_written(alice: Caller) -> None:
    _register(alice)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())
    first = post_item(alice, kind="fact", subject=NAME, attribute="city", value="Lisbon")
    # The second finds no entity of her name (the first's says the placeholder) and makes one.
    # Before: its placeholder name was the first's, the insert broke the scope's unique name and
    # the entity looked for after it, by her name, did not exist: a 500.
    second = post_item(alice, kind="fact", subject=NAME, attribute="employer", value="the harbour office")
    assert first["subject"] == second["subject"] == PLACEHOLDER
    # One entity of the scope says the placeholder, both items are about it; none names her.
    [entity] = Entity.objects.filter(agent=alice.agent)
    assert entity.name == PLACEHOLDER
    assert set(MemoryItem.objects.filter(agent=alice.agent).values_list("entity_id", flat=True)) == {entity.pk}


@pytest.mark.parametrize("keep_name", [NAME, "the organiser"])
def test_a_merge_while_she_is_marked_stores_the_placeholder_in_the_name_and_aliases(
    alice: Caller, keep_name: str
) -> None:
    _register(alice)
    post_item(alice, kind="fact", subject=keep_name, attribute="role", value="books the hotels")
    other = "the organiser" if keep_name == NAME else NAME
    post_item(alice, kind="fact", subject=other, attribute="phone", value="ask at the desk")
    keep = Entity.objects.get(agent=alice.agent, name=keep_name)
    merged = Entity.objects.get(agent=alice.agent, name=other)
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())

    entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")

    keep.refresh_from_db()
    # Before: an entity kept under her name kept it (only its aliases were saved redacted).
    assert NAME not in keep.name and NAME not in (keep.aliases or [])
    assert PLACEHOLDER in [keep.name, *(keep.aliases or [])]
    assert keep.normalized_name == name_normalized(keep.name)
    assert not SubjectMention.objects.filter(agent=alice.agent, user_id=PERSON, table=Table.ENTITY).exists()


@pytest.mark.usefixtures("encrypted")
def test_with_encryption_on_an_entity_renamed_by_the_placeholder_keeps_no_copy_of_her_name(alice: Caller) -> None:
    _register(alice)
    hers = post_item(alice, kind="fact", subject=NAME, attribute="role", value="books the hotels")
    other = post_item(alice, kind="fact", subject="the organiser", attribute="phone", value="ask at the desk")
    # Found by their items: with encryption on an entity's name is sealed, no filter reads it.
    keep = MemoryItem.objects.get(pk=hers["id"]).entity
    merged = MemoryItem.objects.get(pk=other["id"]).entity
    assert keep is not None and merged is not None
    assert keep.normalized_name_kept == name_normalized(NAME)  # opened: sealed at rest
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())

    entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")

    keep = Entity.objects.get(pk=keep.pk)
    assert keep.name == PLACEHOLDER
    # Before: the normalised name a key rotation hashes again was left saying hers.
    assert keep.normalized_name_kept == name_normalized(PLACEHOLDER)


def test_a_merge_racing_an_entity_of_the_placeholders_name_is_a_409_not_a_500(
    alice: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look for an entity of the placeholder's name came first, and one was made after it (the
    look passed, as it would before a concurrent write committed): the unique name answers the same
    409 as the look, not an IntegrityError's 500."""
    from memoryapp.errors import Conflict
    from memoryapp.subjects import detect

    _register(alice)
    post_item(alice, kind="fact", subject=NAME, attribute="role", value="books the hotels")
    post_item(alice, kind="fact", subject="the organiser", attribute="phone", value="ask at the desk")
    keep = Entity.objects.get(agent=alice.agent, name=NAME)
    merged = Entity.objects.get(agent=alice.agent, name="the organiser")
    erasing_mark(agent_id=alice.agent.pk, user_id=PERSON, keeps=())

    def made_meanwhile(entity: Entity) -> None:
        Entity.objects.create(
            agent=alice.agent,
            user_id=entity.user_id,
            project_id=entity.project_id,
            thread_id=entity.thread_id,
            name=PLACEHOLDER,
            normalized_name=name_normalized(PLACEHOLDER),
        )

    monkeypatch.setattr(detect, "_placeholder_name_free", made_meanwhile)
    with pytest.raises(Conflict) as refused:
        entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")
    assert (refused.value.code, refused.value.field) == ("person_being_erased", "entity_id")
