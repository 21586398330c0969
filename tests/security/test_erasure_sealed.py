"""An erasure with encryption on: the leftover scan opens sealed values (a leftover sealed under
another person's key is still found), and the report names the data keys it destroyed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from governance.audit.chain import canonical_json
from governance.erasure.services import erasure_request_file
from governance.models import DataKey, ErasureRequest
from governance.receipts import receipt_verify
from memoryapp.models import Entry
from tests.kit.factories import AgentFactory, EntryFactory, JobRunFactory, ThreadFactory

ANA_SAYS = "My sister Lucinda moved to Porto and I visit her every second weekend by the slow train"
EMAIL = "ana.pereira@example.org"


@pytest.fixture(autouse=True)
def signing_key_of_this_test(tmp_path: Path, settings: Any) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""


def _erase(django_capture_on_commit_callbacks: Any, **fields: Any) -> ErasureRequest:
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", actor="staff:pat", **fields)
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    return request


def _stored(table: str, column: str, pk: object) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column}::text FROM {table} WHERE id = %s", [pk])
        return str(cursor.fetchone()[0])


def test_sealed_leftovers_are_found_and_the_report_names_the_destroyed_keys(
    encrypted: Any, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    alice = AgentFactory(slug="alice")
    other = AgentFactory(slug="other")
    for agent in (alice, other):
        EntryFactory(thread=ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana"), content=ANA_SAYS)
    ana_keys = set(DataKey.objects.filter(user_id="u-ana").values_list("id", flat=True))
    assert len(ana_keys) == 2
    # Leftovers person_erase has no reason to touch, sealed under Bob's key and no one's: Bob's
    # thread quotes Ana's words, a job's result names her e-mail address.
    bob_thread = ThreadFactory(agent=alice, external_id="t-bob", user_id="u-bob")
    quoting = EntryFactory(thread=bob_thread, role="assistant", content=f"Ana told me: {ANA_SAYS}")
    run = JobRunFactory(result={"sent_to": EMAIL.upper()})
    assert _stored("memoryapp_entry", "text", quoting.pk).startswith("enc:v1:")
    assert _stored("governance_jobrun", "result", run.pk).startswith('"enc:v1:')

    request = _erase(django_capture_on_commit_callbacks, identifiers=[EMAIL])

    report = request.report
    assert report is not None and report["outcome"] == "leftovers"
    found = {(f["table"], f["row"]): f["probes"] for f in report["scan"]["findings"]}
    assert any(p.startswith("sample") for p in found[("memoryapp_entry", quoting.pk)])
    assert found[("governance_jobrun", str(run.pk))] == ["identifier 1"]
    assert report["scan"]["found"] == 2
    tables = {t["table"]: t for t in report["scan"]["tables"]}
    assert {"content", "text", "tool_calls"} <= set(tables["memoryapp_entry"]["sealed_columns"])
    # The report names each of Ana's data keys as destroyed, and no live one; Bob's key stays.
    shredding = report["crypto_shredding"]
    assert shredding["encryption"] is True and shredding["data_keys_live"] == []
    assert {k["id"] for k in shredding["data_keys_destroyed"]} == ana_keys
    assert {k["agent"] for k in shredding["data_keys_destroyed"]} == {alice.pk, other.pk}
    assert "no longer open in a copy made before it" in shredding["statement"], shredding
    assert not DataKey.objects.filter(user_id="u-ana", destroyed_at__isnull=True).exists()
    assert DataKey.objects.filter(user_id="u-bob", destroyed_at__isnull=True).count() == 1
    assert Entry.objects.get(pk=quoting.pk).text.startswith("Ana told me")
    # Nothing of what was found is in the report; it is signed, and the signature holds.
    assert ANA_SAYS[5:40] not in canonical_json(report) and EMAIL not in canonical_json(report)
    assert receipt_verify(request.receipt)


def test_with_encryption_off_the_report_says_there_was_no_key_to_destroy(
    db: None, django_capture_on_commit_callbacks: Any
) -> None:
    EntryFactory(thread=ThreadFactory(external_id="t-ana", user_id="u-ana"), content=ANA_SAYS)

    report = _erase(django_capture_on_commit_callbacks).report

    assert report is not None and report["outcome"] == "clean"
    shredding = report["crypto_shredding"]
    assert shredding == {
        "encryption": False,
        "data_keys_destroyed": [],
        "data_keys_live": [],
        "backup": shredding["backup"],
        "statement": shredding["statement"],
    }
    assert "Encryption at rest is off" in shredding["statement"]
    # Measured: the entry's words were in the clear, and an old copy keeps them.
    readable = {(r["table"], r["column"]): r for r in shredding["backup"]["readable"]}
    assert readable[("memoryapp_entry", "text")] == {
        "table": "memoryapp_entry",
        "column": "text",
        "rows": 1,
        "why": "plaintext",
    }
    assert shredding["backup"]["unopenable"] == []
    assert "memoryapp_entry.text: 1 (plaintext)" in shredding["statement"]


def test_a_message_in_another_persons_thread_is_sealed_under_the_senders_key_and_shredded_with_it(
    encrypted: Any, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    alice = AgentFactory(slug="alice")
    EntryFactory(thread=ThreadFactory(agent=alice, external_id="t-ana", user_id="u-ana"), content=ANA_SAYS)
    bob = ThreadFactory(agent=alice, external_id="t-bob", user_id="u-bob")
    EntryFactory(thread=bob, role="user", content="Ana adds: the ferry leaves at nine", metadata={"userId": "u-ana"})

    shredding = _erase(django_capture_on_commit_callbacks).report["crypto_shredding"]

    backup = shredding["backup"]
    unopenable = {(r["table"], r["column"]): r["rows"] for r in backup["unopenable"]}
    readable = {(r["table"], r["column"], r["why"]): r["rows"] for r in backup["readable"]}
    # Her own thread's turn was sealed under her key, destroyed: no old copy opens it.
    # Her message in Bob's thread is sealed under her key too (its sender's, Entry.encryption_owner):
    # no old copy opens it either, and the receipt says so. Its metadata (who sent it) is sealed with
    # it; who sent it stays in clear in `sender`, the row's owner, as `user_id` is (issue 25 §6).
    assert unopenable[("memoryapp_entry", "text")] == 2
    assert not [r for r in readable if r[:2] == ("memoryapp_entry", "text")]
    assert unopenable[("memoryapp_entry", "metadata")] == 1
    assert not [r for r in readable if r[:2] == ("memoryapp_entry", "metadata")]
    # Ids, not words: the receipt says which plaintext columns an old copy reads only ids in.
    assert readable[("memoryapp_entry", "sender", "person ids in plaintext: who sent the message")] == 1
    assert readable[("memoryapp_thread", "user_id", "person ids in plaintext: whose row it is")] == 1
    assert (
        readable[
            ("memoryapp_thread", "external_id", "thread ids in plaintext: the client's, which may name the person")
        ]
        == 1
    )
    assert "in plaintext, the person and thread ids of those rows" in shredding["statement"]
    assert "memoryapp_entry.sender: 1" in shredding["statement"]
    # Left as "plaintext": her turns' content hashes (sha256 digests of turn, place and time), said apart.
    assert {r[:2] for r in readable if r[2] == "plaintext"} == {("memoryapp_entry", "content_hash")}
    assert "still holds 2 readable: memoryapp_entry.content_hash: 2 (plaintext)." in shredding["statement"]
    assert "memoryapp_entry.text" not in shredding["statement"]
    assert "no longer opens with any key" not in shredding["statement"]
