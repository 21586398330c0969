"""The agent's forget with identifiers reaches every mention of the person (issue 25 §4): rows
that are not hers but name her by e-mail, phone or name are redacted to a placeholder (or go, when
she is their subject), re-indexed and re-embedded; another person's words stay whole; `keep`
keeps them; another agent's rows are never touched."""

from __future__ import annotations

import json
from typing import Any

from governance.audit.pseudonyms import pseudonym_names
from governance.models import JobRun
from memoryapp.models import Entity, Entry, MemoryFileVersion, MemoryItem, SubjectMention, Thread
from memoryapp.subjects.index import subject_index_person, subject_index_rebuild
from memoryapp.subjects.matching import PLACEHOLDER
from tests.kit.api import Caller, build_context, error_of, post_ok
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.mentions import CARL_SAYS, IDENTIFIERS, NAME, PERSON, plant, rows_naming_her


def _search(caller: Caller, text: str) -> str:
    answer = caller.client.post("/api/v1/search", {"text": text, "method": "keyword"}, format="json")
    assert answer.status_code == 200, answer.content
    return json.dumps(answer.json())


def test_forget_with_identifiers_leaves_no_mention_of_the_person_anywhere(alice: Caller) -> None:
    planted = plant(alice)
    assert rows_naming_her(alice.agent.pk)  # the planting reached the database
    assert "Valdomiro" in _search(alice, "Valdomiro")

    body = post_ok(
        alice.client, f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS, "mentions": "redact"}, status=200
    )

    mentions = body["counts"]["mentions"]
    assert mentions["redacted_entry"] == 2  # her named in Carl's turn and in the reply
    assert mentions["deleted_item"] == 1 and mentions["deleted_entity"] >= 1
    assert mentions["redacted_item"] >= 2 and mentions["redacted_file_version"] >= 2
    assert mentions["redacted_thread"] >= 2 and mentions["redacted_participants"] == 1
    # Raw SQL over every table of the database: none of her identifiers remain.
    assert rows_naming_her() == {}
    turn = Entry.objects.get(pk=planted["turn"]["id"])
    assert turn.text == f"Please call {PLACEHOLDER} on {PLACEHOLDER} or write to {PLACEHOLDER} about the trip."
    assert turn.embedding is None  # to be embedded again from the new text
    assert Thread.objects.get(agent=alice.agent, external_id="t-carl").metadata["memoryUserIds"] == ["u-carl"]
    assert not MemoryItem.objects.filter(agent=alice.agent, subject=NAME).exists()
    assert not Entity.objects.filter(agent=alice.agent, name=NAME).exists()
    assert not SubjectMention.objects.filter(user_id=PERSON).exists()
    # Search and context no longer return her; another person's words are whole.
    assert "Valdomiro" not in _search(alice, "Valdomiro") and "912" not in _search(alice, "organises")
    context = build_context(alice, "t-carl", max_tokens=4000, project_id="p-trip")
    assert "Valdomiro" not in json.dumps(context) and CARL_SAYS in json.dumps(context)
    assert Entry.objects.filter(agent=alice.agent, text=CARL_SAYS).count() == 1
    assert Thread.objects.filter(agent=alice.agent, external_id="t-team-dora", user_id="u-dora").exists()
    doc = MemoryFileVersion.objects.filter(agent=alice.agent, project_id="p-trip", path__endswith="AGENTS.md").get()
    assert doc.content == f"Questions about bookings go to {PLACEHOLDER}, {PLACEHOLDER}."

    again = post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS}, status=200)
    assert not any(again["counts"]["mentions"].values())


def test_forget_with_mentions_keep_leaves_the_rows_naming_the_person(alice: Caller) -> None:
    plant(alice)
    body = post_ok(
        alice.client, f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS, "mentions": "keep"}, status=200
    )
    assert not any(v for k, v in body["counts"]["mentions"].items() if k != "redacted_participants")
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert MemoryItem.objects.filter(agent=alice.agent, subject=NAME).exists()
    assert "Valdomiro" in _search(alice, "Valdomiro")


def test_registered_identifiers_act_without_being_given_again(alice: Caller) -> None:
    plant(alice)
    assert alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json").status_code == 200
    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {}, status=200)
    assert rows_naming_her() == {}


def test_alices_forget_never_touches_bobs_rows_naming_the_same_person(alice: Caller, bob: Caller) -> None:
    plant(alice)
    plant(bob)
    bobs = rows_naming_her(bob.agent.pk)
    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS}, status=200)
    assert rows_naming_her(alice.agent.pk) == {}
    assert rows_naming_her(bob.agent.pk) == bobs and bobs
    assert "Valdomiro" in _search(bob, "Valdomiro")


def test_bad_identifiers_or_mentions_are_refused_naming_the_field_and_change_nothing(alice: Caller) -> None:
    plant(alice)
    before = rows_naming_her(alice.agent.pk)
    cases = [
        ({"identifiers": {"phones": ["not a phone"]}}, "identifiers.phones[0]"),
        ({"identifiers": {"emails": "a@b.c"}}, "identifiers.emails"),
        ({"identifiers": {"nicknames": []}}, "identifiers.nicknames"),
        ({"identifiers": ["a@b.c"]}, "identifiers"),
        ({"mentions": "shred"}, "mentions"),
    ]
    for body, field in cases:
        answer = alice.client.post(f"/api/v1/users/{PERSON}/forget", body, format="json")
        assert answer.status_code == 400, (body, answer.content)
        assert error_of(answer)["field"] == field, (body, answer.content)
    assert rows_naming_her(alice.agent.pk) == before
    assert Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def test_registering_identifiers_sends_the_index_job_and_the_rebuild_finds_each_mention_once(alice: Caller) -> None:
    plant(alice)
    assert alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json").status_code == 200
    run = JobRun.objects.get(kind="subject_index", agent_id=alice.agent.pk)
    person = pseudonym_names(agent_id=alice.agent.pk, user_id=PERSON)[PERSON]
    assert run.arguments == {"agent_id": alice.agent.pk, "person": person}
    assert subject_index_person(run.arguments) == PERSON

    first = subject_index_rebuild(agent_id=alice.agent.pk, user_id=PERSON)
    again = subject_index_rebuild(agent_id=alice.agent.pk, user_id=PERSON)

    assert first == again
    indexed = set(SubjectMention.objects.filter(agent=alice.agent, user_id=PERSON).values_list("table", "row_id"))
    assert len(indexed) == sum(len(ids) for ids in first.values())
    assert {table for table, _ in indexed} >= {"entry", "thread", "item", "entity", "file_version"}
    # Carl's other turn, which does not name her, is not in the index.
    carl = Entry.objects.get(agent=alice.agent, text=CARL_SAYS)
    assert ("entry", carl.pk) not in indexed


def test_with_encryption_on_the_sealed_mentions_are_found_and_sealed_again_without_her(
    encrypted: Any,  # noqa: F811  (the fixture imported above; first, so it is torn down after the database)
    alice: Caller,
) -> None:
    """The scan opens sealed columns with the live keys; what it writes back is sealed again."""
    planted = plant(alice)
    post_ok(alice.client, f"/api/v1/users/{PERSON}/forget", {"identifiers": IDENTIFIERS}, status=200)

    assert rows_naming_her() == {}  # nothing in clear (sealed or redacted)
    turn = Entry.objects.get(pk=planted["turn"]["id"])  # opened through the ORM
    assert turn.text == f"Please call {PLACEHOLDER} on {PLACEHOLDER} or write to {PLACEHOLDER} about the trip."
    opened = [
        *Entry.objects.filter(agent=alice.agent).values_list("text", flat=True),
        *MemoryItem.objects.filter(agent=alice.agent).values_list("value", flat=True),
        *(v or "" for v in MemoryFileVersion.objects.filter(agent=alice.agent).values_list("content", flat=True)),
    ]
    assert not [text for text in opened if "Valdomiro" in text or "912 345 678" in text]
    assert "Valdomiro" not in _search(alice, "Valdomiro")
