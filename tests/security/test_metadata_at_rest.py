"""Thread and entry metadata and sender names with encryption on (issue 25 §6): sealed under the key
of the person whose words they hold, whole through the API, and still filtered, searched and found
by what SQL reads of them (the columns made from them: `metadata_hashes`, `participants`, `sender`,
`fork_of`, `sender_name_hashes`)."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from governance.audit.pseudonyms import is_pseudonym
from governance.crypto.envelope import data_keys_of_person
from governance.crypto.sealing import sealed_key_id
from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Entry, Thread
from memoryapp.models.people import participant_in, sent_by
from memoryapp.search.retrieval import search
from tests.kit.api import Caller, answered, get_ok, post_entries, post_thread
from tests.kit.crypto import assert_none_planted, pg_dump
from tests.kit.servers import database_conninfo

PLANTED = ["Zanzibarquill", "quokkaparade", "Marmalade Fjord"]


def _raw(table: str, column: str, pk: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column}::text FROM {table} WHERE id = %s", [pk])
        value = str(cursor.fetchone()[0])
    return json.loads(value) if value.startswith('"') else value


def _key_of(person: str) -> str:
    (key,) = [k["id"] for k in data_keys_of_person(user_id=person) if k["destroyed_at"] is None]
    return str(key)


def test_metadata_and_sender_names_are_sealed_in_a_dump_and_whole_through_the_api(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    post_thread(alice, "t-ana", user_id="u-ana", metadata={"note": "Zanzibarquill", "topic": "rome"})
    written = post_entries(
        alice,
        "t-ana",
        [
            {"role": "user", "content": "hello", "sender_name": "Marmalade Fjord", "metadata": {"c": "quokkaparade"}},
            {"role": "user", "content": "and me", "metadata": {"userId": "u-bo"}},
        ],
    )

    assert_none_planted(pg_dump(database_conninfo()), PLANTED)
    thread = Thread.objects.get(external_id="t-ana")
    # Under the person whose words they hold: the thread's and her turn's are Ana's, Bo's turn's his.
    assert sealed_key_id(_raw("memoryapp_thread", "metadata", thread.pk)) == _key_of("u-ana")
    assert sealed_key_id(_raw("memoryapp_entry", "metadata", written[0]["id"])) == _key_of("u-ana")
    assert sealed_key_id(_raw("memoryapp_entry", "sender_name", written[0]["id"])) == _key_of("u-ana")
    assert sealed_key_id(_raw("memoryapp_entry", "metadata", written[1]["id"])) == _key_of("u-bo")
    # Who sent it is the column SQL reads.
    assert list(Entry.objects.filter(sent_by("u-bo")).values_list("pk", flat=True)) == [written[1]["id"]]
    # Whole through the API.
    assert get_ok(alice.client, "/api/v1/threads/t-ana")["metadata"] == {"note": "Zanzibarquill", "topic": "rome"}
    path = get_ok(alice.client, "/api/v1/threads/t-ana/path")["results"]
    assert path[0]["metadata"] == {"c": "quokkaparade"} and path[0]["sender_name"] == "Marmalade Fjord"
    assert path[1]["metadata"] == {"userId": "u-bo"}


def test_the_thread_list_filters_sealed_metadata_by_exact_top_level_values(encrypted: Any, alice: Caller) -> None:
    post_thread(alice, "m1", metadata={"tags": ["a", "b"], "o": {"x": 1, "y": 2}, "n": 1})
    post_thread(alice, "m2", metadata={"tags": ["a"], "o": {}, "n": "1"})
    post_thread(alice, "m3", metadata={"o": {"y": 2, "x": 1}})
    for wanted, ids in (
        ({"tags": ["a"]}, ["m2"]),
        ({"tags": ["a", "b"]}, ["m1"]),
        ({"o": {}}, ["m2"]),
        ({"o": {"x": 1}}, []),
        ({"o": {"x": 1, "y": 2}}, ["m3", "m1"]),  # key order is not part of a value
        ({"n": 1}, ["m1"]),  # compared by type, as the plaintext filter
        ({"n": "1"}, ["m2"]),
        ({"n": 1, "tags": ["a", "b"]}, ["m1"]),
        ({"tags": []}, []),
    ):
        found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps(wanted)})["results"]
        assert [t["id"] for t in found] == ids, wanted
    # The metadata is sealed; the filter read the pairs' keyed hashes.
    assert not Thread.objects.filter(metadata__has_key="tags").exists()
    assert all(len(t.metadata_hashes or []) == len(t.metadata) for t in Thread.objects.all())


def test_a_forks_copied_metadata_stays_under_the_origins_persons_key_until_her_erasure_reseals_it(
    encrypted: Any, alice: Caller
) -> None:
    post_thread(alice, "t-ana", user_id="u-ana", metadata={"contact": "Zanzibarquill"})
    first = post_entries(alice, "t-ana", [{"role": "user", "content": "hi"}])[0]
    answered(
        alice.client.post(
            "/api/v1/threads/t-ana/fork", {"entry_id": first["id"], "new_thread_id": "t-fork"}, format="json"
        ),
        201,
    )
    post_thread(alice, "t-fork", user_id="u-bo", metadata={"mine": "bo"})
    fork = Thread.objects.get(external_id="t-fork")
    # Handed to Bo, the fork's metadata still holds Ana's words: sealed under her key.
    assert fork.words_of == "u-ana"
    assert sealed_key_id(_raw("memoryapp_thread", "metadata", fork.pk)) == _key_of("u-ana")
    copy = Entry.objects.get(thread=fork)
    assert copy.fork_of == first["id"] and copy.metadata["forkOf"] == first["id"]

    person_erase(user_id="u-ana", agent_ids=[alice.agent.pk])

    # What stays of it is Bo's: sealed under his key, readable by the service.
    fork.refresh_from_db()
    assert fork.words_of == "" and fork.metadata == {"mine": "bo"}
    assert sealed_key_id(_raw("memoryapp_thread", "metadata", fork.pk)) == _key_of("u-bo")


def test_a_thread_given_to_another_person_has_its_metadata_sealed_again_under_theirs(
    encrypted: Any, alice: Caller
) -> None:
    post_thread(alice, "t-1", user_id="u-ana", metadata={"note": "Zanzibarquill"})
    thread = Thread.objects.get(external_id="t-1")
    assert sealed_key_id(_raw("memoryapp_thread", "metadata", thread.pk)) == _key_of("u-ana")
    answered(alice.client.patch("/api/v1/threads/t-1", {"user_id": "u-bo"}, format="json"), 200)
    assert sealed_key_id(_raw("memoryapp_thread", "metadata", thread.pk)) == _key_of("u-bo")
    assert get_ok(alice.client, "/api/v1/threads/t-1")["metadata"] == {"note": "Zanzibarquill"}


def test_participants_are_kept_by_pseudonym_and_found_by_the_erasure(
    encrypted: Any, alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"memoryUserIds": ["u-carl", "u-ana"]})
    thread = Thread.objects.get(external_id="t-carl")
    assert len(thread.participants) == 2 and all(is_pseudonym(p) for p in thread.participants)
    assert "u-ana" not in _raw("memoryapp_thread", "participants", thread.pk)
    assert list(Thread.objects.filter(participant_in("u-ana", agent_id=alice.agent.pk))) == [thread]
    assert not Thread.objects.filter(participant_in("u-zed", agent_id=alice.agent.pk)).exists()

    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error

    thread.refresh_from_db()
    assert thread.metadata == {"memoryUserIds": ["u-carl"]} and len(thread.participants) == 1
    assert not Thread.objects.filter(participant_in("u-ana", agent_id=alice.agent.pk)).exists()
    # The receipt says what an old copy keeps of the list: pseudonyms, not ids in plaintext; and
    # the metadata that named her, sealed under Carl's key (readable: it is his thread's).
    readable = {(r["table"], r["column"]): r["why"] for r in request.report["crypto_shredding"]["backup"]["readable"]}
    assert readable[("memoryapp_thread", "participants")].startswith("keyed pseudonyms")
    assert readable[("memoryapp_thread", "metadata")] == "sealed under another person's key"


def test_keyword_search_finds_the_turns_of_a_sender_named_by_the_question(encrypted: Any, alice: Caller) -> None:
    post_thread(alice, "t-1", user_id="u-ana")
    turns = post_entries(
        alice,
        "t-1",
        [
            {"role": "user", "content": "I painted a sunrise", "sender_name": "Melanie"},
            {"role": "assistant", "content": "I painted my kitchen", "sender_name": "Caroline"},
        ],
    )
    thread = Thread.objects.get(external_id="t-1")
    outcome = search(
        agent=alice.agent,
        text="What did Melanie say?",
        thread=thread,
        kinds=("entries",),
        limit=10,
        channels=("keyword",),
        neighbours=False,
        diversify=False,
    )
    assert outcome.errors == []
    assert [h.id for h in outcome.hits][:1] == [turns[0]["id"]]
    assert outcome.hits[0].sender_name == "Melanie"


def test_the_thread_list_filter_finds_threads_written_before_their_metadata_was_sealed(
    encrypted: Any, alice: Caller
) -> None:
    """A database migrated from before 0050 with encryption on holds threads whose metadata is
    still plaintext and whose pair hashes are null until `encryption_rotate` has run: the list's
    metadata filter finds them meanwhile (by the plaintext), as it finds the sealed ones."""
    post_thread(alice, "new", metadata={"topic": "rome"})
    post_thread(alice, "old", metadata={"topic": "other"})
    with connection.cursor() as cursor:  # as the migration leaves a row written before it
        cursor.execute(
            "UPDATE memoryapp_thread SET metadata = %s::jsonb, metadata_hashes = NULL WHERE external_id = 'old'",
            [json.dumps({"topic": "rome", "n": 1})],
        )
    found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"topic": "rome"})})["results"]
    assert sorted(t["id"] for t in found) == ["new", "old"]
    found = get_ok(alice.client, "/api/v1/threads", {"metadata": json.dumps({"topic": "rome", "n": "1"})})["results"]
    assert found == []
