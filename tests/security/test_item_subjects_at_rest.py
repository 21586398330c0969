"""Memory items' subjects and metadata with encryption on (issue 25 §6): sealed under the item's key
as its value is, whole through the API, and found by what SQL reads of them instead: the subject's
keyed hash (`subject_hash`: the slot's lookups, the list's filter, the admin's search) and the marks
kept in columns of their own (`end_given`, `stale_by`); rows written before are found by their
plaintext until `encryption_rotate` seals them; the erasure's receipt counts them among what an old
copy no longer opens."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from governance.crypto.sealing import sealed_key_id
from governance.erasure.services import erasure_request_file
from governance.models import DataKey, ErasureRequest
from memoryapp.consolidation.selectors import stale_by_dedupe
from memoryapp.items.selectors import items_about, items_known
from memoryapp.items.services import STALE_BY_DEDUPE, StaleMark, item_write, items_mark_stale
from memoryapp.models import MemoryItem
from tests.kit.api import Caller, answered
from tests.kit.crypto import assert_none_planted, pg_dump
from tests.kit.servers import database_conninfo

PLANTED = ["Zanzibarquill", "Quokkaparade", "plumbagovortex"]
SUBJECT = "Zanzibarquill Fjord"


def _system_trust(caller: Caller) -> None:
    key = caller.agent.keys.get()
    key.max_trust = "system"
    key.save()


def _post(caller: Caller, **body: Any) -> dict[str, Any]:
    return answered(caller.client.post("/api/v1/items", body, format="json"), 201)


def _raw(pk: str) -> tuple[str, str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT subject, subject_hash, metadata::text FROM memoryapp_memoryitem WHERE id = %s", [pk])
        row = cursor.fetchone()
    return (row[0], row[1], row[2])


def _key_of(agent_id: int, user_id: str) -> str:
    return str(DataKey.objects.get(agent_id=agent_id, user_id=user_id, destroyed_at__isnull=True).pk)


def test_subjects_and_metadata_are_sealed_and_a_slot_still_finds_its_states(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _system_trust(alice)
    first = _post(
        alice,
        kind="fact",
        subject=SUBJECT,
        attribute="city",
        value="Porto",
        trust="system",
        user_id="u-ana",
        metadata={"source": "Quokkaparade desk"},
    )
    second = _post(
        alice, kind="fact", subject=SUBJECT, attribute="city", value="Lisbon", trust="system", user_id="u-ana"
    )

    subject, hashed, metadata = _raw(first["id"])
    assert subject.startswith("enc:v1:") and hashed.startswith("bh:") and metadata.startswith('"enc:v1:')
    assert sealed_key_id(subject) == _key_of(alice.agent.pk, "u-ana")
    assert _raw(second["id"])[1] == hashed  # one slot, one hash
    dump = pg_dump(database_conninfo())
    assert "enc:v1:" in dump
    assert_none_planted(dump, PLANTED)

    # The second state closed the first: the slot was found by the subject's hash.
    states = {i.pk: i for i in MemoryItem.objects.filter(agent=alice.agent)}
    assert (states[first["id"]].status, states[second["id"]].status) == ("superseded", "active")
    assert states[first["id"]].subject == SUBJECT and states[first["id"]].metadata == {"source": "Quokkaparade desk"}
    history = answered(alice.client.get(f"/api/v1/items/{second['id']}/history"), 200)
    assert "Porto" in json.dumps(history) and "Lisbon" in json.dumps(history)
    # The list's subject filter: the subject in any case (the entity's name is hashed folded).
    for asked in (SUBJECT, "zanzibarquill fjord", " ZANZIBARQUILL  FJORD "):
        found = answered(alice.client.get("/api/v1/items", {"subject": asked, "user_id": "u-ana"}), 200)["results"]
        assert sorted(i["id"] for i in found) == sorted([first["id"], second["id"]]), asked
    assert (
        answered(alice.client.get("/api/v1/items", {"subject": "Zanzibarquill", "user_id": "u-ana"}), 200)["results"]
        == []
    )
    # Keyword search finds an item by a word of its sealed subject (the blind index holds it).
    body = {"text": "zanzibarquill", "method": "keyword", "kinds": ["items"], "user_id": "u-ana"}
    hits = answered(alice.client.post("/api/v1/search", body, format="json"), 200)["results"]
    assert second["id"] in [h["id"] for h in hits]
    # The admin's search: a whole subject, in any case.
    assert set(items_about(MemoryItem.objects.all(), subject="ZANZIBARQUILL fjord").values_list("pk", flat=True)) == {
        first["id"],
        second["id"],
    }
    # "What did the agent know": the slot's states together, sorted by their opened subjects.
    known = items_known(agent=alice.agent, at=timezone.now(), user_id="u-ana")
    assert [i.pk for i in known] == [second["id"]]


def test_the_marks_sql_reads_of_the_sealed_metadata_have_columns_of_their_own(
    encrypted: Any, db: None, alice: Caller
) -> None:
    start = timezone.now() - timedelta(days=2)
    ended = item_write(
        agent=alice.agent,
        kind="fact",
        subject="Ana",
        attribute="job",
        value="baker",
        trust="system",
        user_id="u-ana",
        valid_from=start,
        valid_to=start + timedelta(days=1),
    )
    kept = item_write(
        agent=alice.agent, kind="fact", subject="Ana", attribute="pet", value="a cat", trust="system", user_id="u-ana"
    )
    assert (ended.end_given, kept.end_given) == (True, False)
    assert _raw(ended.pk)[2].startswith('"enc:v1:')
    items_mark_stale(marks=[StaleMark(kept.pk, {"by": STALE_BY_DEDUPE, "kept": ended.pk})], actor="consolidation")
    kept.refresh_from_db()
    assert kept.stale_by == STALE_BY_DEDUPE and kept.metadata["stale_because"]["kept"] == ended.pk
    assert list(stale_by_dedupe(agent_id=alice.agent.pk).values_list("pk", flat=True)) == [kept.pk]
    # An end the writer gave was known from the start: asked as known a moment ago, the state held
    # only within its end (the `end_given` column; the metadata itself is sealed).
    known = items_known(agent=alice.agent, at=start + timedelta(hours=36), user_id="u-ana")
    assert ended.pk not in [i.pk for i in known]


def test_items_written_before_their_subject_was_sealed_are_found_by_plaintext_until_the_rotation(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    """A database migrated from before 0054 with encryption on holds items whose subject, its hash
    column and metadata are plaintext: a new state of the slot still closes the old one (found by
    the plaintext subject), and `encryption_rotate` then seals and hashes them."""
    old = item_write(
        agent=alice.agent, kind="fact", subject="Bo Quokkaparade", attribute="city", value="Porto", trust="system"
    )
    with connection.cursor() as cursor:  # as the migration leaves a row written before it
        cursor.execute(
            "UPDATE memoryapp_memoryitem SET subject = %s, subject_hash = %s, metadata = %s::jsonb WHERE id = %s",
            ["Bo Quokkaparade", "Bo Quokkaparade", json.dumps({"n": "plumbagovortex"}), old.pk],
        )
    new = item_write(
        agent=alice.agent, kind="fact", subject="Bo Quokkaparade", attribute="city", value="Lisbon", trust="system"
    )
    old.refresh_from_db()
    assert (old.status, old.subject, old.metadata) == ("superseded", "Bo Quokkaparade", {"n": "plumbagovortex"})
    assert _raw(new.pk)[1].startswith("bh:")

    call_command("encryption_rotate", stdout=StringIO())
    subject, hashed, metadata = _raw(old.pk)
    assert subject.startswith("enc:v1:") and metadata.startswith('"enc:v1:') and hashed == _raw(new.pk)[1]
    old.refresh_from_db()
    assert old.subject == "Bo Quokkaparade" and old.metadata == {"n": "plumbagovortex"}


def test_the_receipt_counts_an_old_copys_item_subjects_as_unopenable_and_their_hashes_apart(
    encrypted: Any, transactional_db: None, alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    item_write(
        agent=alice.agent,
        kind="preference",
        subject="Ana Zanzibarquill",
        attribute="drink",
        value="tea",
        trust="system",
        user_id="u-ana",
        metadata={"said": "plumbagovortex"},
    )
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", identifiers=[], actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    backup = request.report["crypto_shredding"]["backup"]
    shut = {(r["table"], r["column"]) for r in backup["unopenable"]}
    assert {("memoryapp_memoryitem", "subject"), ("memoryapp_memoryitem", "metadata")} <= shut
    # What stays readable of the item is what is not sealed: its person's id, its attribute.
    readable = {r["column"] for r in backup["readable"] if r["table"] == "memoryapp_memoryitem"}
    assert readable <= {"user_id", "attribute"}, backup
    hashed = [r for r in backup["unsealed"] if (r["table"], r["column"]) == ("memoryapp_memoryitem", "subject_hash")]
    assert hashed and hashed[0]["what"] == "keyed hashes of whole values (equality)"
    assert (
        "memoryapp_memoryitem.subject_hash: 1 (keyed hashes of whole values (equality))"
        in (request.report["crypto_shredding"]["statement"])
    )


def test_what_the_agent_knew_after_a_new_state_closed_one_written_before_the_subject_was_sealed(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    """A database migrated with encryption on: an old state (its subject_hash still plaintext) closed
    by a new one (hashed) is closed in a replay of a moment after both, before the rotation runs."""
    old = item_write(
        agent=alice.agent, kind="fact", subject="Bo Quokkaparade", attribute="city", value="Porto", trust="system"
    )
    with connection.cursor() as cursor:  # as the migration leaves a row written before it
        cursor.execute(
            "UPDATE memoryapp_memoryitem SET subject = %s, subject_hash = %s WHERE id = %s",
            ["Bo Quokkaparade", "Bo Quokkaparade", old.pk],
        )
    new = item_write(
        agent=alice.agent, kind="fact", subject="Bo Quokkaparade", attribute="city", value="Lisbon", trust="system"
    )
    old.refresh_from_db()
    assert old.status == "superseded"
    later = timezone.now() + timedelta(milliseconds=1)
    MemoryItem.objects.filter(pk__in=[old.pk, new.pk]).update(recorded_at=later - timedelta(seconds=5))
    MemoryItem.objects.filter(pk=old.pk).update(activated_at=later - timedelta(seconds=5))
    MemoryItem.objects.filter(pk=new.pk).update(activated_at=later - timedelta(seconds=4))
    known = items_known(agent=alice.agent, at=later)
    assert [i.value for i in known] == ["Lisbon"]
