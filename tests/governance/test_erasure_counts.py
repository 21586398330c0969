"""The erasure report counts what the database lost: rows per table and kind, vectors apart.

The counts are checked against the database itself: every table of the public schema counted with
raw SQL before and after the erasure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection

from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from memoryapp.models import Agent, Entry
from memoryapp.threads.services import thread_fork
from tests.kit.factories import AgentFactory, EntryFactory, MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def signing_key_of_this_test(tmp_path: Path, settings: Any) -> None:
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""


def _table_rows() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        tables = [name for (name,) in cursor.fetchall()]
        counts = {}
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}"')
            counts[table] = int(cursor.fetchone()[0])
    return counts


def _vectors(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{table}" WHERE embedding IS NOT NULL')
        return int(cursor.fetchone()[0])


def _embed_everything() -> None:
    vector = "[" + ",".join(["0.1"] * django_settings.EMBEDDING_DIMENSIONS) + "]"
    with connection.cursor() as cursor:
        for table in ("memoryapp_entry", "memoryapp_memoryitem"):
            cursor.execute(f'UPDATE "{table}" SET embedding = %s::vector', [vector])


def _world() -> Agent:
    """Ana's threads (one forked to Bob), her message in Bob's thread, her item; Bob's own memory."""
    alice: Agent = AgentFactory(slug="alice")
    ana = ThreadFactory(agent=alice, external_id="t-ana", user_id="u-ana")
    first = EntryFactory(thread=ana, role="user", content="I moved to Porto and visit Lucinda on weekends")
    EntryFactory(thread=ana, role="assistant", content="Noted, Porto it is.")
    thread_fork(thread=ana, entry_id=first.id, new_thread_id="t-fork")
    bob = ThreadFactory(agent=alice, external_id="t-bob", user_id="u-bob")
    EntryFactory(thread=bob, role="user", content="Bob asks about the warehouse in Leeds")
    EntryFactory(thread=bob, role="user", content="Ana adds: the ferry leaves at nine", metadata={"userId": "u-ana"})
    EntryFactory(thread=bob, role="assistant", content="The ferry, noted.")
    MemoryItemFactory(agent=alice, subject="Ana", attribute="city", value="Porto", user_id="u-ana")
    MemoryItemFactory(agent=alice, subject="Bob", attribute="site", value="Leeds", user_id="u-bob")
    _embed_everything()
    return alice


def _erase(django_capture_on_commit_callbacks: Any, **fields: Any) -> ErasureRequest:
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", actor="staff:pat", **fields)
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    return request


def test_the_report_counts_per_table_the_rows_the_database_lost(django_capture_on_commit_callbacks: Any) -> None:
    _world()
    before = _table_rows()
    vectors_before = {t: _vectors(t) for t in ("memoryapp_entry", "memoryapp_memoryitem")}

    report = _erase(django_capture_on_commit_callbacks).report

    after = _table_rows()
    tables = report["tables"]
    # Each table's change is its rows deleted less its rows inserted, as the report says, and no
    # table changed that the report does not name (the request and its job run are the erasure's own
    # records, written outside its steps).
    own = {"governance_erasurerequest", "governance_jobrun", "governance_auditrecord", "memoryapp_event"}
    for table in before:
        lost = before[table] - after[table]
        said = tables.get(table, {}).get("deleted", 0) - tables.get(table, {}).get("inserted", 0)
        if table in own:
            continue
        assert lost == said, (table, lost, tables.get(table))
    assert tables["memoryapp_entry"]["deleted"] == before["memoryapp_entry"] - after["memoryapp_entry"] > 0
    # Vectors are counted apart, each where it went, and never as rows.
    for table, had in vectors_before.items():
        gone = had - _vectors(table)
        assert tables[table].get("vectors_deleted", 0) + tables[table].get("vectors_cleared", 0) == gone > 0
    totals = report["totals"]
    assert report["erased_total"] == totals["deleted"] + totals["redacted"]
    assert totals["deleted"] == sum(t.get("deleted", 0) for t in tables.values())
    assert f"{totals['deleted']} rows deleted and {totals['redacted']} redacted" in report["summary"]


def test_a_redaction_counts_the_rows_it_redacted_and_deletes_none_of_the_entries(
    django_capture_on_commit_callbacks: Any,
) -> None:
    _world()
    entries_before = Entry.objects.count()
    redacted_before = Entry.objects.filter(redacted_at__isnull=False).count()

    report = _erase(django_capture_on_commit_callbacks, mode="redact").report

    entry = report["tables"]["memoryapp_entry"]
    assert entry.get("deleted", 0) == entries_before - Entry.objects.count()
    now_redacted = Entry.objects.filter(redacted_at__isnull=False).count() - redacted_before
    assert now_redacted > 0 and entry["redacted"] >= now_redacted
    assert report["erased_total"] == report["totals"]["deleted"] + report["totals"]["redacted"]


def test_the_vectors_sign_bits_are_counted_where_the_receipt_says_what_a_backup_keeps(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """An entry's sign bits (memoryapp.search.space, written by a trigger from its vector) are in a
    copy made before the erasure as its vector is: counted as the statements took them, listed with
    the vectors in what such a copy keeps, and given their reason in the scan's coverage."""

    def with_bits() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM memoryapp_entry WHERE embedding_bits IS NOT NULL")
            return int(cursor.fetchone()[0])

    _world()
    had = with_bits()
    assert had == _vectors("memoryapp_entry") > 0

    report = _erase(django_capture_on_commit_callbacks).report

    gone = had - with_bits()
    kept = report["crypto_shredding"]["backup"]["unsealed"]
    bits = [r for r in kept if (r["table"], r["column"]) == ("memoryapp_entry", "embedding_bits")]
    assert bits == [
        {"table": "memoryapp_entry", "column": "embedding_bits", "rows": gone, "what": "the vectors' sign bits"}
    ]
    assert gone > 0
    vectors = [r for r in kept if (r["table"], r["column"]) == ("memoryapp_entry", "embedding")]
    assert vectors[0]["rows"] == gone  # every vector it took had its bits
    coverage = {(c["table"], c["column"]): c for c in report["scan"]["coverage"]}
    assert coverage[("memoryapp_entry", "embedding_bits")]["why"].startswith("a vector's sign bits")
