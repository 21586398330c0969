"""The erasure receipt's backup statement, checked against a real backup: a pg_dump taken before
the erasure, restored after it and opened with the live keys, opens exactly the rows the receipt
says an old copy still reads, and none of those it says no key opens."""

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

from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from governance.receipts import receipt_verify
from memoryapp.models import Entry
from tests.kit.api import Caller, answered
from tests.kit.crypto import K1, pg_dump, pg_tool
from tests.kit.servers import database_conninfo, database_url

ROOT = Path(__file__).resolve().parents[2]

# Run in a process of its own against the restored database: each entry's id and whether its
# text opened with the keys live now.
READ_ALL = """
import json, django
django.setup()
from memoryapp.models import Entry
out = []
for pk in Entry.objects.order_by("seq", "id").values_list("pk", flat=True):
    try:
        Entry.objects.get(pk=pk).text
        out.append([pk, True])
    except Exception:
        out.append([pk, False])
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


def _post(caller: Caller, thread_id: str, user_id: str, entries: list[dict[str, Any]]) -> None:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": user_id}, format="json"), (200, 201))
    answered(caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": entries}, format="json"), 201)


def test_an_old_dump_opened_with_the_live_keys_yields_exactly_what_the_receipt_says(
    encrypted: Any, transactional_db: None, alice: Caller, tmp_path: Path, fresh_database: str, settings: Any
) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    _post(
        alice,
        "t-ana",
        "u-ana",
        [{"role": "user", "content": "Ana hides the key under the Zanzibarquill pot"}],
    )
    _post(
        alice,
        "t-bo",
        "u-bo",
        [
            {"role": "user", "content": "Bo likes the Marmalade Fjord trail"},
            {"role": "user", "content": "Ana adds: my PIN is quokkaparade", "metadata": {"userId": "u-ana"}},
        ],
    )
    before = set(Entry.objects.values_list("pk", flat=True))
    dump_file = tmp_path / "before-erasure.sql"
    dump_file.write_text(pg_dump(database_conninfo()))

    request = erasure_request_file(user_id="u-ana", actor="staff:pat")
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    erased = before - set(Entry.objects.values_list("pk", flat=True))
    assert len(erased) >= 2

    subprocess.run(
        [
            *(pg_tool("psql"), "-q", "-v", "ON_ERROR_STOP=1"),
            *("--dbname", database_conninfo(name=fresh_database), "-f", str(dump_file)),
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
    opened = dict(json.loads(done.stdout.strip().splitlines()[-1]))

    backup = request.report["crypto_shredding"]["backup"]
    said_unopenable = sum(
        r["rows"] for r in backup["unopenable"] if (r["table"], r["column"]) == ("memoryapp_entry", "text")
    )
    said_readable = sum(
        r["rows"] for r in backup["readable"] if (r["table"], r["column"]) == ("memoryapp_entry", "text")
    )
    # Of the entries the erasure took, the old dump opens exactly as many as the receipt says it
    # still reads, and fails on exactly as many as it says no key opens.
    assert sum(1 for pk in erased if opened[pk]) == said_readable
    assert sum(1 for pk in erased if not opened[pk]) == said_unopenable
    # Her message in Bo's thread was sealed under her key (its sender's): no old copy opens it.
    assert said_unopenable == 2 and said_readable == 0
    assert receipt_verify(request.receipt)
    assert request.receipt["document"]["report"]["crypto_shredding"]["backup"] == backup
