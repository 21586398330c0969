"""The audit chain under the isolation levels PostgreSQL offers, with two real connections.

An append reads the chain's end after taking the chain's lock. Under READ COMMITTED each statement
reads with a snapshot of its own, so the read after the lock sees every append committed before it
(tests/governance/test_audit.py, concurrent appends). Under REPEATABLE READ or SERIALIZABLE the
transaction reads with the snapshot its first statement took: an append that committed after it is
not seen, and the append read a stale end. The chain cannot fork (`seq` is unique), but the staff
action or write appending failed with a unique violation on the audit table (a 500), never run
again. A database whose `default_transaction_isolation` is REPEATABLE READ made every append
racing another such a one.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from governance.audit.chain import audit_append, audit_verify
from governance.models import AuditRecord
from memoryapp.retry import atomic_retrying, is_lock_conflict
from tests.kit.concurrency import in_threads

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 30.0


def _isolated(level: str, other: threading.Event, seen: threading.Event) -> int:
    """In a transaction at `level`: a read (its snapshot), then the other appends and commits, then
    this one appends."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        cursor.execute("SELECT count(*) FROM governance_auditrecord")
    seen.set()
    assert other.wait(WAIT)
    return audit_append(action="staff.isolated", actor="staff:rita").seq


def _isolated_transaction(level: str, other: threading.Event, seen: threading.Event) -> int:
    with transaction.atomic():
        return _isolated(level, other, seen)


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_an_append_whose_snapshot_missed_another_is_a_lock_conflict_run_again(level: str) -> None:
    audit_append(action="first")
    committed, seen = threading.Event(), threading.Event()
    tries: list[int] = []

    @atomic_retrying
    def staff_action() -> int:
        tries.append(1)
        if len(tries) == 1:
            return _isolated(level, committed, seen)
        return audit_append(action="staff.isolated", actor="staff:rita").seq

    def other() -> int:
        assert seen.wait(WAIT)
        with transaction.atomic():
            seq = audit_append(action="other", actor="agent:1").seq
        committed.set()
        return seq

    outcomes = in_threads(staff_action, other)
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    assert len(tries) == 2  # the first try lost, and was run again
    assert sorted(outcomes) == [2, 3]
    assert list(AuditRecord.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]
    assert audit_verify().ok


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_stale_append_fails_as_a_lock_conflict_not_a_unique_violation(level: str) -> None:
    audit_append(action="first")
    committed, seen = threading.Event(), threading.Event()

    def other() -> int:
        assert seen.wait(WAIT)
        seq = audit_append(action="other").seq
        committed.set()
        return seq

    stale, fresh = in_threads(lambda: _isolated_transaction(level, committed, seen), other)
    assert fresh == 2
    assert isinstance(stale, Exception) and is_lock_conflict(stale), repr(stale)
    assert audit_verify().ok and AuditRecord.objects.count() == 2


def test_a_database_defaulting_to_repeatable_read_appends_concurrently_as_one_chain() -> None:
    """The server's (or database's) default isolation is not the service's: each connection is
    READ COMMITTED, so concurrent appends each read the end the one before committed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        name = cursor.fetchone()[0]
        cursor.execute(f"ALTER DATABASE \"{name}\" SET default_transaction_isolation = 'repeatable read'")
    try:

        def writer(n: int) -> int:
            for i in range(10):
                with transaction.atomic():
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT current_setting('transaction_isolation')")
                        assert cursor.fetchone()[0] == "read committed"
                    audit_append(action="concurrent", actor=f"w{n}", subject=str(i))
            return 10

        assert in_threads(*(lambda n=n: writer(n) for n in range(4))) == [10] * 4
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{name}" RESET default_transaction_isolation')
    assert list(AuditRecord.objects.order_by("seq").values_list("seq", flat=True)) == list(range(1, 41))
    assert audit_verify().ok
