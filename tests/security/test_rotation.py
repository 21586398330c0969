"""Rotation: every data key rewrapped under the new master key (and, with --rekey, every row sealed
again under a new data key), after which the old master key is removed and everything reads; and
the same job encrypts a database written with encryption off."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import connection

from governance.crypto.startup import encryption_refusal
from governance.models import DataKey, JobRun
from memoryapp.models import Entry
from tests.kit.api import Caller, answered
from tests.kit.crypto import K1, K2, assert_none_planted, keys_set, pg_dump
from tests.kit.servers import database_conninfo

TEXTS = ["the Zanzibarquill pot is blue", "call me about quokkaparade", "Marmalade Fjord at noon"]


def _post(caller: Caller, thread_id: str = "t1", user_id: str = "u-ana") -> None:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": user_id}, format="json"), (200, 201))
    entries = [{"role": "user", "content": text} for text in TEXTS]
    answered(caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": entries}, format="json"), 201)


def _rotate(*args: str) -> dict[str, Any]:
    out = StringIO()
    call_command("encryption_rotate", *args, stdout=out)
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def _stored(column: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column}::text FROM memoryapp_entry ORDER BY seq")
        return [row[0] for row in cursor.fetchall()]


def _read(caller: Caller, thread_id: str = "t1") -> list[Any]:
    return [e["content"] for e in answered(caller.client.get(f"/api/v1/threads/{thread_id}/path"), 200)["results"]]


def test_rotation_rewraps_every_data_key_and_the_old_master_key_can_go(
    encrypted: Any, db: None, settings: Any, alice: Caller
) -> None:
    _post(alice)
    _post(alice, "t2", "u-bo")
    keys_set(settings, f"{K2},{K1}")

    result = _rotate()

    assert result["data_keys_rewrapped"] == 3  # ana's, bo's, and the agent's own (its blind index)
    assert set(DataKey.objects.values_list("master_key_id", flat=True)) == {"k2"}
    run = JobRun.objects.get(kind="encryption_rotate")
    # Every row of every sealed table checked: the six entries, their two threads (metadata), and
    # the rotation's own job run.
    assert run.status == "succeeded" and run.progress_done == run.progress_total == 9
    keys_set(settings, K2)
    assert encryption_refusal() == ""
    assert _read(alice) == TEXTS and _read(alice, "t2") == TEXTS
    found = answered(
        alice.client.post("/api/v1/search", {"text": "quokkaparade", "method": "keyword"}, format="json"), 200
    )
    assert {h["text"] for h in found["results"]} == {"call me about quokkaparade"}


def test_rotation_with_rekey_seals_every_row_again_and_destroys_the_old_data_keys(
    encrypted: Any, db: None, settings: Any, alice: Caller
) -> None:
    _post(alice)
    before = _stored("text")
    old_keys = set(DataKey.objects.values_list("id", flat=True))
    keys_set(settings, f"{K2},{K1}")

    result = _rotate("--rekey", "--settle", "0", "--batch", "2")

    after = _stored("text")
    assert all(a.startswith("enc:v1:") and a != b for a, b in zip(after, before, strict=True))
    assert not any(key in value for value in after for key in old_keys)
    assert result["rows_resealed"]["memoryapp_entry"] == 3
    # The entries' two keys, and the key of no agent that sealed the rotation's own job run.
    assert result["data_keys_retired_and_destroyed"] == len(old_keys) + 1
    assert None not in set(DataKey.objects.filter(id__in=old_keys).values_list("destroyed_at", flat=True))
    keys_set(settings, K2)
    assert encryption_refusal() == ""
    assert _read(alice) == TEXTS
    # Run again: nothing left to do.
    assert sum(_rotate()["rows_resealed"].values()) == 0


def test_turning_encryption_on_for_an_existing_database_encrypts_it_by_the_rotation(
    encrypted: Any, transactional_db: None, settings: Any, alice: Caller
) -> None:
    keys_set(settings, "")
    _post(alice)
    assert "Zanzibarquill" in pg_dump(database_conninfo())
    assert Entry.objects.filter(keyword_hashes__isnull=True).count() == 3

    keys_set(settings, K1)
    result = _rotate()

    assert result["rows_resealed"]["memoryapp_entry"] == 3
    assert_none_planted(pg_dump(database_conninfo()), ["Zanzibarquill", "quokkaparade", "Marmalade Fjord"])
    assert _read(alice) == TEXTS
    assert Entry.objects.filter(keyword_hashes__isnull=True).count() == 0
    found = answered(
        alice.client.post("/api/v1/search", {"text": "Zanzibarquill", "method": "keyword"}, format="json"), 200
    )
    assert [h["text"] for h in found["results"]] == ["the Zanzibarquill pot is blue"]


def test_the_rotation_seals_a_persons_message_in_another_persons_thread_under_the_senders_key(
    encrypted: Any, transactional_db: None, settings: Any, alice: Caller
) -> None:
    keys_set(settings, "")
    answered(alice.client.post("/api/v1/threads", {"id": "t-bo", "user_id": "u-bo"}, format="json"), (200, 201))
    entries = [
        {"role": "user", "content": "Bo likes the Marmalade Fjord trail"},
        {"role": "user", "content": "Ana adds: my PIN is quokkaparade", "metadata": {"userId": "u-ana"}},
    ]
    answered(alice.client.post("/api/v1/threads/t-bo/entries", {"entries": entries}, format="json"), 201)

    keys_set(settings, K1)
    _rotate()

    ana = DataKey.objects.get(user_id="u-ana", destroyed_at__isnull=True).pk
    bo = DataKey.objects.get(user_id="u-bo", destroyed_at__isnull=True).pk
    assert [text.split(":")[2] for text in _stored("text")] == [bo, ana]
    assert _read(alice, "t-bo") == [e["content"] for e in entries]
    assert sum(_rotate()["rows_resealed"].values()) == 0
