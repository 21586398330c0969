from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from governance.audit.chain import (
    GENESIS_HASH,
    _hashed_fields,
    audit_append,
    audit_records,
    audit_verify,
    database_identity,
    record_hash,
)
from governance.jobs.broker import job_enqueue
from governance.models import AuditRecord
from governance.tasks import audit_verify_job
from tests.kit import PROJECT_ROOT
from tests.kit.concurrency import in_threads


@pytest.mark.django_db
def test_append_chains_records_and_verify_passes() -> None:
    first = audit_append(action="item.approved", actor="staff:rita", subject="mem_1", outcome="approved")
    second = audit_append(action="item.rejected", actor="staff:rita", subject="mem_2", outcome="rejected")
    assert (first.seq, second.seq) == (1, 2)
    assert second.prev_hash == first.hash
    assert audit_verify().as_dict() == {"records": 2, "ok": True, "first_broken": None, "anchors": 0, "reason": ""}


@pytest.mark.django_db
def test_verify_finds_the_first_modified_record() -> None:
    for n in range(5):
        audit_append(action="thread.deleted", subject=f"t-{n}", outcome="deleted")
    AuditRecord.objects.filter(seq=3).update(outcome="kept")  # tampering
    result = audit_verify()
    assert (result.ok, result.first_broken, result.records) == (False, 3, 3)


@pytest.mark.django_db
def test_verify_finds_a_deleted_record() -> None:
    for n in range(4):
        audit_append(action="thread.deleted", subject=f"t-{n}")
    AuditRecord.objects.filter(seq=2).delete()
    assert audit_verify().first_broken == 3


@pytest.mark.django_db
def test_audit_records_filters() -> None:
    audit_append(action="a", thread_id="t1")
    audit_append(action="b", thread_id="t2")
    audit_append(action="a", thread_id="t2")
    assert [r.seq for r in audit_records(action="a")] == [1, 3]
    assert [r.seq for r in audit_records(thread_id="t2", after_seq=2)] == [3]


@pytest.mark.django_db
def test_rolled_back_transaction_takes_its_record_with_it() -> None:
    audit_append(action="kept")
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_append(action="lost")
        raise RuntimeError
    audit_append(action="kept-too")
    assert list(AuditRecord.objects.values_list("action", "seq")) == [("kept", 1), ("kept-too", 2)]
    assert audit_verify().ok


@pytest.mark.django_db
def test_an_append_takes_the_lock_reads_the_chains_end_and_inserts_in_one_round_trip() -> None:
    """Two statements in one query string (each its own snapshot: the INSERT's read of the chain's
    end after the lock is held, as the concurrent appends below show), the hash made in the
    database as `record_hash` makes it."""
    audit_append(action="first")
    with CaptureQueriesContext(connection) as queries:
        second = audit_append(action="second")
    assert len(queries) == 1
    assert "pg_advisory_xact_lock" in queries[0]["sql"] and "ORDER BY seq DESC" in queries[0]["sql"]
    assert "INSERT INTO" in queries[0]["sql"]
    stored = AuditRecord.objects.get(seq=2)
    assert second.seq == 2 and second.hash == stored.hash and second.prev_hash == stored.prev_hash
    assert stored.prev_hash == AuditRecord.objects.get(seq=1).hash
    assert audit_verify().ok


@pytest.mark.django_db
def test_the_databases_hash_of_a_record_is_the_clients() -> None:
    """Text beyond ASCII, quotes, a nested `seq` key, numbers and nulls in the details: the hash the
    INSERT computes is `record_hash` of the record as read back (what `audit_verify` checks)."""
    for n, details in enumerate(
        [
            {},
            {"seq": 0, "nested": {"seq": "1", "z": [1, 2.5, None, True]}, 'a"b': "caf\u00e9 \u2603 \U0001f600"},
            {"text": "line\nbreak \\ back\tslash"},
        ]
    ):
        record = audit_append(action=f"r{n}", actor="Zo\u00eb", subject='\u00e1"x"', agent_id=None, details=details)
        stored = AuditRecord.objects.get(pk=record.pk)
        assert stored.hash == record_hash(stored.prev_hash, _hashed_fields(stored)) == record.hash
    assert audit_verify().ok


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_stay_one_unbroken_chain() -> None:
    def writer(n: int) -> int:
        for i in range(15):
            with transaction.atomic():
                audit_append(action="concurrent", actor=f"w{n}", subject=str(i))
        return 15

    assert in_threads(*(lambda n=n: writer(n) for n in range(8))) == [15] * 8
    seqs = list(AuditRecord.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 121))
    # Every committed append was anchored too, in whatever order the commits came.
    assert audit_verify().as_dict() == {"records": 120, "ok": True, "first_broken": None, "anchors": 120, "reason": ""}


@pytest.mark.django_db
def test_audit_verify_command_fails_on_a_broken_chain(capsys) -> None:
    audit_append(action="x")
    call_command("audit_verify")
    assert '"ok": true' in capsys.readouterr().out
    AuditRecord.objects.update(actor="someone else")
    with pytest.raises(Exception, match="broken at seq 1"):
        call_command("audit_verify")


# --- anchors outside the database -----------------------------------------------------------------


def _anchored_chain(count: int) -> None:
    for n in range(count):
        audit_append(action="thread.delete", subject=f"t-{n}", outcome="deleted")  # each its own commit


def _anchor_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.django_db(transaction=True)
def test_each_committed_record_is_anchored_in_the_file_and_an_untouched_chain_verifies(
    audit_anchor_file: Path,
) -> None:
    _anchored_chain(5)
    records = list(AuditRecord.objects.order_by("seq"))
    here = database_identity()
    assert here is not None and here.endswith(f":{connection.settings_dict['NAME']}")
    # Each line names its chain (the hash of its first record) and the database that wrote it.
    assert _anchor_lines(audit_anchor_file) == [
        {
            "chain": records[0].hash,
            "db": here,
            "seq": r.seq,
            "hash": r.hash,
            "at": r.at.isoformat(timespec="microseconds"),
        }
        for r in records
    ]
    assert audit_verify().as_dict() == {"records": 5, "ok": True, "first_broken": None, "anchors": 5, "reason": ""}


@pytest.mark.django_db(transaction=True)
def test_an_anchor_never_names_a_seq_that_was_rolled_back(audit_anchor_file: Path) -> None:
    audit_append(action="kept")
    with transaction.atomic():
        audit_append(action="kept-too")
        with pytest.raises(RuntimeError), transaction.atomic():
            audit_append(action="lost")  # seq 3, rolled back with its savepoint
            raise RuntimeError
        assert [a["seq"] for a in _anchor_lines(audit_anchor_file)] == [1]  # not before the commit
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_append(action="lost-too")
        raise RuntimeError
    audit_append(action="third")
    hashes = dict(AuditRecord.objects.values_list("seq", "hash"))
    assert [(a["seq"], a["hash"]) for a in _anchor_lines(audit_anchor_file)] == [(s, hashes[s]) for s in (1, 2, 3)]
    assert audit_verify().ok


@pytest.mark.django_db(transaction=True)
def test_verify_names_the_first_missing_seq_when_the_newest_records_are_cut_off() -> None:
    _anchored_chain(6)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM governance_auditrecord WHERE seq > 3")
    result = audit_verify()
    assert (result.ok, result.first_broken, result.records, result.anchors) == (False, 4, 3, 6)
    assert "anchored" in result.reason and "ends at seq 3" in result.reason


@pytest.mark.django_db(transaction=True)
def test_verify_names_the_first_seq_of_a_suffix_rehashed_consistently() -> None:
    _anchored_chain(6)
    # Someone who can write the table rewrites records 4.. and every hash after, link by link.
    prev_hash = AuditRecord.objects.get(seq=3).hash
    with connection.cursor() as cursor:
        for record in AuditRecord.objects.filter(seq__gte=4).order_by("seq"):
            record.outcome, record.prev_hash = "kept", prev_hash
            record.hash = record_hash(prev_hash, _hashed_fields(record))
            cursor.execute(
                "UPDATE governance_auditrecord SET outcome = %s, prev_hash = %s, hash = %s WHERE seq = %s",
                [record.outcome, record.prev_hash, record.hash, record.seq],
            )
            prev_hash = record.hash
    result = audit_verify()
    assert (result.ok, result.first_broken) == (False, 4)
    assert "differs from its anchor" in result.reason
    # The same rewrite without the anchors is invisible to the chain alone: what the anchors add.
    from django.conf import settings

    settings.AUDIT_ANCHOR_FILE = Path(str(settings.AUDIT_ANCHOR_FILE) + ".elsewhere")
    assert audit_verify().ok


@pytest.mark.django_db(transaction=True)
def test_a_torn_line_is_skipped_and_a_record_whose_anchor_was_lost_still_verifies(
    audit_anchor_file: Path, settings
) -> None:
    _anchored_chain(2)
    with audit_anchor_file.open("a") as file:
        file.write('{"seq": 3, "hash": "ab')  # a crash in the middle of a write
    # The anchor of this record cannot be written (as if the crash came right after its commit):
    # the change stands, and nothing is raised.
    settings.AUDIT_ANCHOR_FILE = audit_anchor_file.parent  # a directory: cannot be appended to
    audit_append(action="unanchored")
    settings.AUDIT_ANCHOR_FILE = audit_anchor_file
    audit_append(action="anchored again")
    assert AuditRecord.objects.count() == 4
    lines = audit_anchor_file.read_text().splitlines()
    assert lines[-1] == json.dumps(
        {
            "chain": AuditRecord.objects.get(seq=1).hash,
            "db": database_identity(),
            "seq": 4,
            "hash": AuditRecord.objects.get(seq=4).hash,
            "at": AuditRecord.objects.get(seq=4).at.isoformat(timespec="microseconds"),
        }
    )
    assert audit_verify().as_dict() == {"records": 4, "ok": True, "first_broken": None, "anchors": 3, "reason": ""}


@pytest.mark.django_db(transaction=True)
def test_the_admin_page_and_the_verification_job_report_a_truncated_chain(admin_client) -> None:
    _anchored_chain(4)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM governance_auditrecord WHERE seq >= 3")
    page = admin_client.get("/admin/governance/auditrecord/verify/", follow=True).content.decode()
    assert "BROKEN at seq 3" in page and "ends at seq 2" in page
    run = job_enqueue(kind="audit_verify", task_name=audit_verify_job.name, arguments={})
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert (run.result["ok"], run.result["first_broken"], run.result["anchors"]) == (False, 3, 4)
    assert "ends at seq 2" in run.result["reason"]


# --- anchors of several databases in one file -----------------------------------------------------


@pytest.fixture
def other_database(request: pytest.FixtureRequest) -> str:
    """Another migrated database on the tests' server, as a DATABASE_URL pointed elsewhere."""
    empty: str = request.getfixturevalue("empty_database")
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DATABASE_URL": empty},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return empty


def _in_other(url: str, anchor_file: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """A manage.py command of a process on the other database, anchoring in the same file."""
    env = {**os.environ, "DATABASE_URL": url, "AUDIT_ANCHOR_FILE": str(anchor_file)}
    return subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _append_in_other(url: str, anchor_file: Path, count: int) -> None:
    code = f"from governance.audit.chain import audit_append\nfor n in range({count}): audit_append(action='elsewhere')"
    done = _in_other(url, anchor_file, "shell", "-c", code)
    assert done.returncode == 0, done.stderr


@pytest.mark.django_db(transaction=True)
def test_two_databases_anchoring_in_one_file_each_verify_their_own_chain(
    other_database: str, audit_anchor_file: Path
) -> None:
    # DATABASE_URL pointed at another database (or the database made anew) while VAR_DIR, and so
    # the anchor file, stays: both chains have a seq 1, 2, 3... in the same file.
    _append_in_other(other_database, audit_anchor_file, 3)
    _anchored_chain(5)
    _append_in_other(other_database, audit_anchor_file, 2)
    assert len(_anchor_lines(audit_anchor_file)) == 10
    assert audit_verify().as_dict() == {"records": 5, "ok": True, "first_broken": None, "anchors": 5, "reason": ""}
    elsewhere = _in_other(other_database, audit_anchor_file, "audit_verify")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert json.loads(elsewhere.stdout)["anchors"] == 5

    # Each chain is still held to its own anchors: the newest records cut off here are seen here only.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM governance_auditrecord WHERE seq > 3")
    result = audit_verify()
    assert (result.ok, result.first_broken, result.anchors) == (False, 4, 5)
    assert _in_other(other_database, audit_anchor_file, "audit_verify").returncode == 0


def _rehash_from(seq: int, **changes: str) -> None:
    """What someone who can write the table does: rewrite records from `seq` on and every hash after."""
    before = AuditRecord.objects.filter(seq=seq - 1).values_list("hash", flat=True).first()
    prev_hash = before or GENESIS_HASH
    with connection.cursor() as cursor:
        for record in AuditRecord.objects.filter(seq__gte=seq).order_by("seq"):
            for name, value in changes.items():
                setattr(record, name, value)
            record.prev_hash = prev_hash
            record.hash = record_hash(prev_hash, _hashed_fields(record))
            cursor.execute(
                "UPDATE governance_auditrecord SET outcome = %s, prev_hash = %s, hash = %s WHERE seq = %s",
                [record.outcome, record.prev_hash, record.hash, record.seq],
            )
            prev_hash = record.hash


@pytest.mark.django_db(transaction=True)
def test_a_chain_rewritten_from_its_first_record_is_seen_although_its_anchors_name_another_chain() -> None:
    # Anchors are compared within a chain, named by its first record's hash: rewriting that record
    # gives the chain another name, but the anchors also say which database wrote them.
    _anchored_chain(4)
    _rehash_from(1, outcome="kept")
    result = audit_verify()
    assert (result.ok, result.first_broken) == (False, 1)
    assert "first record" in result.reason
    # And every record of this database gone: its anchors still say there were some.
    AuditRecord.objects.all().delete()
    result = audit_verify()
    assert (result.ok, result.first_broken) == (False, 1)


@pytest.mark.django_db(transaction=True)
def test_anchor_lines_without_a_chain_are_read_as_the_current_chains(audit_anchor_file: Path) -> None:
    # Lines an older version wrote ({"seq", "hash", "at"}) anchored the one chain the file was for.
    _anchored_chain(3)
    hashes = dict(AuditRecord.objects.values_list("seq", "hash"))
    audit_anchor_file.write_text(
        "".join(json.dumps({"seq": s, "hash": h, "at": "x"}) + "\n" for s, h in hashes.items())
    )
    assert audit_verify().as_dict() == {"records": 3, "ok": True, "first_broken": None, "anchors": 3, "reason": ""}
    with audit_anchor_file.open("a") as file:
        file.write(json.dumps({"seq": 2, "hash": "f" * 64, "at": "x"}) + "\n")
    assert (audit_verify().ok, audit_verify().first_broken) == (False, 2)
