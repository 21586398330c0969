"""Crypto-shredding: a dump taken before a person's data key was destroyed, restored into a fresh
database afterwards, no longer yields that person's plaintext; everyone else's rows still read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from governance.crypto.envelope import data_key_destroy
from governance.crypto.keystore import keystore_read
from governance.models import DataKey
from memoryapp.agents.services import agent_delete
from memoryapp.forgetting.person import person_erase
from memoryapp.models import Entry
from tests.kit.api import Caller, answered
from tests.kit.crypto import K1, assert_none_planted, pg_dump, pg_tool
from tests.kit.factories import AgentFactory, EntryFactory, ThreadFactory
from tests.kit.servers import database_conninfo, database_url

ROOT = Path(__file__).resolve().parents[2]

# Run in a process of its own against the restored database: every entry's thread and its text,
# or the error its sealed text gave.
READ_ALL = """
import json, django
django.setup()
from memoryapp.models import Entry
out = []
for pk in Entry.objects.order_by("seq", "id").values_list("pk", flat=True):
    try:
        entry = Entry.objects.select_related("thread").get(pk=pk)
        out.append([entry.thread.external_id, entry.text, ""])
    except Exception as exc:
        out.append([None, None, f"{type(exc).__name__}: {exc}"])
print(json.dumps(out))
"""


@pytest.fixture
def fresh_database() -> Iterator[str]:
    name = f"restored_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_conninfo(name="postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(database_conninfo(name="postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _post(caller: Caller, thread_id: str, user_id: str, texts: list[str]) -> None:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": user_id}, format="json"), (200, 201))
    entries = [{"role": "user", "content": text} for text in texts]
    answered(caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": entries}, format="json"), 201)


def test_a_restored_old_dump_no_longer_opens_a_shredded_persons_rows_and_still_opens_the_others(
    encrypted: Any, transactional_db: None, alice: Caller, tmp_path: Path, fresh_database: str
) -> None:
    ana = ["Ana hides the key under the Zanzibarquill pot", "Ana's PIN is quokkaparade"]
    bo = ["Bo likes the Marmalade Fjord trail", "Bo's cat is called tangerinecipher"]
    _post(alice, "t-ana", "u-ana", ana)
    _post(alice, "t-bo", "u-bo", bo)
    dump = pg_dump(database_conninfo())
    assert_none_planted(dump, ["Zanzibarquill", "quokkaparade", "Marmalade Fjord", "tangerinecipher"])

    destroyed = data_key_destroy(agent_id=alice.agent.pk, user_id="u-ana")

    assert destroyed is not None and destroyed in dump  # the old rows name the key they were sealed under
    assert keystore_read(destroyed) is None
    assert data_key_destroy(agent_id=alice.agent.pk, user_id="u-ana") is None  # once only

    dump_file = tmp_path / "before-erasure.sql"
    dump_file.write_text(dump)
    subprocess.run(
        [
            pg_tool("psql"),
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "--dbname",
            database_conninfo(name=fresh_database),
            "-f",
            str(dump_file),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(name=fresh_database),
        "MEMORY_ENCRYPTION_KEYS": K1,
        "MEMORY_KEYSTORE_DIR": str(encrypted.MEMORY_KEYSTORE_DIR),
    }
    done = subprocess.run(
        [sys.executable, "-c", READ_ALL], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout.strip().splitlines()[-1])

    read = [text for _, text, error in rows if not error]
    failed = [error for _, _, error in rows if error]
    assert sorted(read) == sorted(bo)
    assert len(failed) == len(ana)
    assert all(f"data key {destroyed} is not in the key store" in error for error in failed)
    assert not any(word in done.stdout for word in ("Zanzibarquill", "quokkaparade"))


def test_destroying_a_key_needs_a_person(encrypted: Any, db: None, alice: Caller) -> None:
    with pytest.raises(ValueError, match="user_id"):
        data_key_destroy(agent_id=alice.agent.pk, user_id="")
    assert data_key_destroy(agent_id=alice.agent.pk, user_id="u-nobody") is None


def test_the_erasure_of_a_person_destroys_their_data_key_and_leaves_the_others(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _post(alice, "t-ana", "u-ana", ["Ana's locker code is Zanzibarquill"])
    _post(alice, "t-bo", "u-bo", ["Bo's locker code is tangerinecipher"])
    keys = dict(DataKey.objects.filter(agent_id=alice.agent.pk).values_list("user_id", "id"))

    counts = person_erase(user_id="u-ana", agent_ids=[alice.agent.pk])

    assert counts["data_keys_destroyed"] == 1
    assert keystore_read(keys["u-ana"]) is None and keystore_read(keys["u-bo"]) is not None
    assert DataKey.objects.get(pk=keys["u-ana"]).destroyed_at is not None
    assert [e.text for e in Entry.objects.filter(thread__external_id="t-bo")] == ["Bo's locker code is tangerinecipher"]
    # A redaction keeps rows sealed under the person's key: it destroys nothing.
    assert person_erase(user_id="u-bo", agent_ids=[alice.agent.pk], mode="redact").get("data_keys_destroyed", 0) == 0
    assert keystore_read(keys["u-bo"]) is not None


def test_deleting_an_agent_destroys_every_data_key_it_had(
    encrypted: Any, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    gone, kept = AgentFactory(slug="gone"), AgentFactory(slug="kept")
    for agent in (gone, kept):
        EntryFactory(thread=ThreadFactory(agent=agent, user_id="u-ana"), content="Ana's words")
        EntryFactory(thread=ThreadFactory(agent=agent, user_id=""), content="nobody's words")
    keys = set(DataKey.objects.filter(agent_id=gone.pk).values_list("id", flat=True))
    assert len(keys) >= 2 and all(keystore_read(key) is not None for key in keys)

    with django_capture_on_commit_callbacks(execute=True):
        counts = agent_delete(agent=gone, actor="staff:pat")

    assert counts["data_keys_destroyed"] == len(keys)
    assert not DataKey.objects.filter(agent_id=gone.pk, destroyed_at__isnull=True).exists()
    assert all(keystore_read(key) is None for key in keys)
    # The other agent's keys, Ana's under it included, are whole and its rows read.
    assert DataKey.objects.filter(agent_id=kept.pk, destroyed_at__isnull=True).count() == len(keys)
    assert {e.text for e in Entry.objects.filter(agent=kept)} == {"Ana's words", "nobody's words"}
