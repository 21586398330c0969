from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from governance.audit import audit_append, audit_records, audit_verify
from governance.models import AuditRecord


@pytest.mark.django_db
def test_append_chains_records_and_verify_passes() -> None:
    first = audit_append(action="item.approved", actor="staff:rita", subject="mem_1", outcome="approved")
    second = audit_append(action="item.rejected", actor="staff:rita", subject="mem_2", outcome="rejected")
    assert (first.seq, second.seq) == (1, 2)
    assert second.prev_hash == first.hash
    assert audit_verify().as_dict() == {"records": 2, "ok": True, "first_broken": None}


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


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_stay_one_unbroken_chain() -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(15):
                with transaction.atomic():
                    audit_append(action="concurrent", actor=f"w{n}", subject=str(i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seqs = list(AuditRecord.objects.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 121))
    assert audit_verify().as_dict() == {"records": 120, "ok": True, "first_broken": None}


@pytest.mark.django_db
def test_audit_verify_command_fails_on_a_broken_chain(capsys) -> None:
    audit_append(action="x")
    call_command("audit_verify")
    assert '"ok": true' in capsys.readouterr().out
    AuditRecord.objects.update(actor="someone else")
    with pytest.raises(Exception, match="broken at seq 1"):
        call_command("audit_verify")
