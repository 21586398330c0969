"""The leftover scan covers every table and column of the database, or says why not, and finds the
person where bookkeeping, arrays and files keep them: the audit trail, Django's admin log, the
access log's id arrays, and files under VAR_DIR (logs, export archives).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.erasure.services import Probe, erasure_request_file, leftovers_scan, scan_coverage, tables_to_scan
from governance.models import ErasureRequest
from memoryapp.models import AccessLog, Agent, Entry
from tests.kit.factories import AgentFactory, EntryFactory, ThreadFactory

pytestmark = pytest.mark.django_db

EMAIL = "ana.pereira@example.org"


@pytest.fixture(autouse=True)
def var_dir_of_this_test(tmp_path: Path, settings: Any) -> Path:
    settings.VAR_DIR = tmp_path / "var"
    settings.VAR_DIR.mkdir()
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""
    return settings.VAR_DIR


def _erase(django_capture_on_commit_callbacks: Any, **fields: Any) -> dict[str, Any]:
    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id="u-ana", actor="staff:pat", **fields)
    request.refresh_from_db()
    assert request.status == ErasureRequest.Status.DONE, request.error
    assert request.report is not None
    return request.report


def _ana(agent: Agent) -> Entry:
    thread = ThreadFactory(agent=agent, external_id="trip:p-ana", user_id="u-ana")
    return EntryFactory(thread=thread, role="user", content="I take the ferry to Porto on Fridays")


def test_the_coverage_names_every_column_of_every_table_scanned_or_why_not() -> None:
    coverage = scan_coverage(tables_to_scan())

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c"
            " JOIN information_schema.tables t USING (table_schema, table_name)"
            " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
        )
        columns = {(t, c): kind for t, c, kind in cursor.fetchall()}
    said = {(row["table"], row["column"]): row for row in coverage}
    assert set(said) == set(columns)
    for key, row in said.items():
        assert row["scanned"] in ("yes", "opened") or row["why"], key
    scanned = {key for key, row in said.items() if row["scanned"] != "no"}
    # The bookkeeping, the requests and holds, with their arrays and JSON.
    assert {
        ("governance_auditrecord", "details"),
        ("governance_auditrecord", "thread_id"),
        ("memoryapp_event", "thread_id"),
        ("memoryapp_accesslog", "item_ids"),
        ("memoryapp_accesslog", "entry_ids"),
        ("django_admin_log", "object_repr"),
        ("django_admin_log", "change_message"),
        ("memoryapp_legalhold", "reason"),
        ("governance_erasurerequest", "identifiers"),
        ("governance_exportrequest", "user_id"),
    } <= scanned
    # Every column that can hold text in a table of a model is scanned, but for fixed values and
    # tables said not to be scanned, each with its reason.
    tables = {m._meta.db_table for m in apps.get_models()}
    for (table, column), kind in columns.items():
        if table in tables and kind in ("text", "character varying", "jsonb", "ARRAY"):
            row = said[(table, column)]
            assert row["scanned"] != "no" or row["why"].startswith(
                ("table not scanned", "one of fixed", "a link", "an array of numbers")
            ), row


def test_the_scan_finds_the_person_in_the_audit_trail_and_the_admin_log(
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice = AgentFactory(slug="alice")
    _ana(alice)
    planted = audit_append(action="memory_file.written", agent_id=alice.pk, details={"scope": {"user_id": "u-ana"}})
    by_thread = audit_append(action="thread.created", agent_id=alice.pk, thread_id="trip:p-ana")
    staff = get_user_model().objects.create_user(username="pat")
    admin_line = LogEntry.objects.create(
        user=staff, action_time=timezone.now(), object_repr="hold #2 on user u-ana", action_flag=CHANGE
    )

    report = _erase(django_capture_on_commit_callbacks)

    scan = report["scan"]
    booked = {(f["table"], f["row"]): f["probes"] for f in scan["bookkeeping"]}
    assert booked[("governance_auditrecord", str(planted.pk))] == ["user id"]
    assert booked[("governance_auditrecord", str(by_thread.pk))] == ["thread id 1"]
    assert booked[("django_admin_log", str(admin_line.pk))] == ["user id"]
    assert scan["bookkeeping_found"] >= 3
    assert "bookkeeping rows still name the person" in report["summary"]


def test_the_scan_finds_the_person_and_erased_row_ids_in_the_arrays_of_the_access_log(
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice = AgentFactory(slug="alice")
    said = _ana(alice)
    bob = ThreadFactory(agent=alice, external_id="t-bob", user_id="u-bob")
    tagged = AccessLog.objects.create(
        agent=alice, thread=bob, source="search", at=timezone.now(), item_ids=["u-ana"], user_id="u-bob"
    )

    report = _erase(django_capture_on_commit_callbacks)

    booked = {(f["table"], f["row"]): f["probes"] for f in report["scan"]["bookkeeping"]}
    assert booked[("memoryapp_accesslog", str(tagged.pk))] == ["user id"]
    assert report["scan"]["erased_ids_looked_for"] == 1
    # An id of an erased row the access log's own step did not strip (a row of another agent's
    # scope, scanned here with every agent) is found by the ids taken before the erasure.
    left = AccessLog.objects.create(agent=alice, thread=bob, source="context", at=timezone.now(), entry_ids=[said.pk])
    scan = leftovers_scan(probes=[Probe("user id", "u-ana", True)], agent_ids=[], erased_ids=[said.pk])
    booked = {(f["table"], f["row"]): f["probes"] for f in scan["bookkeeping"]}
    assert booked[("memoryapp_accesslog", str(left.pk))] == ["erased row id"]


def test_the_scan_finds_the_person_in_a_log_file_and_an_export_archive_under_var_dir(
    django_capture_on_commit_callbacks: Any, var_dir_of_this_test: Path
) -> None:
    _ana(AgentFactory(slug="alice"))
    logs = var_dir_of_this_test / "logs"
    logs.mkdir()
    (logs / "access.log").write_text('127.0.0.1 "GET /api/v1/users/u-ana/identifiers" 200\n' * 3)
    (logs / "quiet.log").write_text("nothing about anyone\n")
    with zipfile.ZipFile(var_dir_of_this_test / "archive.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("threads.json", '{"thread": "trip:p-ana", "mail": "' + EMAIL + '"}')
    (var_dir_of_this_test / "receipt-signing-key.pem").write_text("not read: a key u-ana")

    report = _erase(django_capture_on_commit_callbacks, identifiers=[EMAIL])

    files = report["scan"]["files"]
    found = {f["file"]: f["probes"] for f in files["findings"]}
    assert found == {
        "logs/access.log": ["user id"],
        "archive.zip": ["identifier 1", "thread id 1"],
    }
    assert {"path": "receipt-signing-key.pem", "why": "a key (secret key, signing key)"} in files["not_read"]
    assert report["scan"]["found"] >= 2 and report["outcome"] == "leftovers"
