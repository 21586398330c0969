"""Deleting a thread with forks while the embedding job (or a re-embedding of everything) writes
vectors: no deadlock at all, the thread goes, and every other entry ends with its vector (issue 11,
defect 3)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.test import override_settings

from governance.models import AuditRecord
from memoryapp import retry
from memoryapp.forgetting.services import thread_delete
from memoryapp.models import Entry, Thread
from memoryapp.search.indexing import embed_pending, reembed_all
from memoryapp.threads.services import entries_add, thread_create, thread_fork
from tests.kit.api import Caller
from tests.kit.concurrency import in_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.fault]

ENTRIES = 2000
ROUNDS = 3


def _thread_with_forks(caller: Caller, name: str) -> tuple[Thread, list[Thread]]:
    thread = thread_create(agent=caller.agent, external_id=name)
    for start in range(0, ENTRIES, 1000):
        entries_add(
            thread=thread,
            entries=[
                {"role": "user" if i % 2 else "assistant", "content": f"turn {i} of {name} about topic {i % 17}"}
                for i in range(start, start + 1000)
            ],
        )
    middle = Entry.objects.filter(thread=thread, seq=ENTRIES // 2).get()
    fork = thread_fork(thread=thread, entry_id=middle.id, new_thread_id=f"{name}-fork")
    fork_of_fork = thread_fork(
        thread=fork, entry_id=Entry.objects.filter(thread=fork, seq=ENTRIES // 4).get().id, new_thread_id=f"{name}-ff"
    )
    # Another branch of the fork that is not a copy: it stays when the origin goes.
    entries_add(thread=fork, entries=[{"role": "user", "content": f"own words of {name} {i}"} for i in range(300)])
    return thread, [fork, fork_of_fork]


# The two jobs that write vectors while deletes run: the embedding job (in a transaction per batch)
# and the re-embedding of everything (`manage.py reembed`, whose batches run in autocommit).
VECTOR_WRITERS: dict[str, Callable[[int], Any]] = {
    "embedding": lambda agent_id: embed_pending(agent_id=agent_id),
    "reembed": lambda agent_id: reembed_all(agent_id=agent_id),
}


# A large batch keeps the vector write of one batch long enough to overlap the delete's row locks.
@override_settings(EMBEDDING_BATCH_SIZE=1000)
@pytest.mark.parametrize("writer", sorted(VECTOR_WRITERS))
def test_deleting_a_thread_with_forks_while_vectors_are_written_never_deadlocks_and_leaves_every_other_entry_embedded(
    alice: Caller, writer: str, caplog: pytest.LogCaptureFixture
) -> None:
    write_vectors = VECTOR_WRITERS[writer]
    # A deadlock the delete lost is run again unseen by the client (`atomic_retrying`), so the
    # outcomes alone cannot tell whether the lock order holds: its warning can.
    caplog.set_level(logging.WARNING, logger=retry.logger.name)
    for round_ in range(ROUNDS):
        thread, forks = _thread_with_forks(alice, f"t{round_}")
        # The writes above embedded eagerly: start from entries without vectors, as after a burst.
        Entry.objects.filter(agent=alice.agent).update(embedding=None, embedded_at=None)
        outcomes = in_threads(
            lambda: write_vectors(alice.agent.pk),
            lambda doomed=thread: thread_delete(thread=doomed, actor="test"),
            timeout=300,
        )
        assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
        conflicts = [r.getMessage() for r in caplog.records if "lost a lock conflict" in r.getMessage()]
        assert conflicts == [], f"round {round_}: {conflicts}"
        # Whatever the job passed over while the delete held it is taken by the next run (the sweep).
        embed_pending(agent_id=alice.agent.pk)

        assert not Thread.objects.filter(pk=thread.pk).exists()
        assert not Entry.objects.filter(thread_id=thread.pk).exists()
        for fork in forks:
            assert Thread.objects.filter(pk=fork.pk).exists()
            # The copies of the deleted thread's entries went with it.
            assert not Entry.objects.filter(thread=fork, metadata__has_key="forkOf").exists()
        left = Entry.objects.filter(agent=alice.agent)
        assert left.filter(thread=forks[0]).count() == 300
        assert not left.filter(embedding__isnull=True, redacted_at__isnull=True).exclude(text="").exists()


def test_reembedding_holds_the_rows_it_claimed_until_their_vectors_are_written(alice: Caller) -> None:
    # Rows claimed with SKIP LOCKED and then updated by a second statement: in autocommit the claim's
    # locks end with its SELECT, and the UPDATE then waits for rows a cascade took meanwhile, in the
    # UPDATE's own order (a deadlock). Probed at that moment from another connection.
    thread = thread_create(agent=alice.agent, external_id="held")
    entries_add(thread=thread, entries=[{"role": "user", "content": f"turn {i} about rome"} for i in range(6)])
    probes: list[str] = []

    def probe(ids: list[str]) -> str:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT id FROM memoryapp_entry WHERE id = ANY(%s) FOR UPDATE NOWAIT", [ids])
            return "free"
        except OperationalError:
            return "held"

    def after_each_query(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if "SKIP LOCKED" in sql and "memoryapp_entry" in sql:
            probes.extend(in_threads(lambda: probe(list(params[0]))))
        return result

    assert not connection.in_atomic_block
    with connection.execute_wrapper(after_each_query):
        outcome = reembed_all(agent_id=alice.agent.pk)
    assert probes and set(probes) == {"held"}, probes
    assert outcome["embedded"] == 6
    assert not Entry.objects.filter(thread=thread, embedding__isnull=True).exists()


def _waiting_on_a_row_lock(*, besides: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> %s", [besides])
        return bool(cursor.fetchone()[0])


def test_a_delete_chosen_as_deadlock_victim_is_run_again_and_the_thread_goes(alice: Caller) -> None:
    # A writer nobody thought of holds an entry row, then wants the thread the delete holds:
    # PostgreSQL aborts the delete (it waited first), and the service runs it again.
    thread = thread_create(agent=alice.agent, external_id="victim")
    entries_add(thread=thread, entries=[{"role": "user", "content": f"turn {i}"} for i in range(20)])
    row = Entry.objects.filter(thread=thread).order_by("seq").first()
    assert row is not None
    holding, go_on = threading.Event(), threading.Event()

    def other_writer() -> str:
        with transaction.atomic(), connection.cursor() as cursor:
            # It never runs the deadlock check itself, so the delete is the one PostgreSQL aborts.
            cursor.execute("SET LOCAL deadlock_timeout = '60s'")
            cursor.execute("SELECT pg_backend_pid()")
            holding.pid = cursor.fetchone()[0]  # type: ignore[attr-defined]
            cursor.execute("SELECT id FROM memoryapp_entry WHERE id = %s FOR UPDATE", [row.pk])
            holding.set()
            go_on.wait(60)
            cursor.execute("SELECT id FROM memoryapp_thread WHERE id = %s FOR UPDATE", [thread.pk])
        return "committed"

    def deleter() -> None:
        assert holding.wait(60)
        thread_delete(thread=thread, actor="test")

    def conductor() -> None:
        # Once the delete waits for the held row, the other writer asks for the thread: a cycle.
        assert holding.wait(60)
        for _ in range(600):
            if _waiting_on_a_row_lock(besides=holding.pid):  # type: ignore[attr-defined]
                break
            time.sleep(0.05)
        go_on.set()

    outcomes = in_threads(other_writer, deleter, conductor, timeout=300)
    assert outcomes[:2] == ["committed", None], outcomes
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert not Entry.objects.filter(thread_id=thread.pk).exists()
    # One delete, audited once: the aborted try left nothing behind.
    assert AuditRecord.objects.filter(action="thread.delete", thread_id="victim").count() == 1


def _raise_deadlock() -> None:
    """A real error of SQLSTATE 40P01 from the server, as a deadlock victim gets it."""
    with connection.cursor() as cursor:
        cursor.execute("DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01'; END $$")


def test_a_lock_conflict_is_tried_again_and_what_the_last_try_wrote_stands_once(alice: Caller) -> None:
    tries: list[int] = []

    @retry.atomic_retrying
    def rename(*, name: str) -> str:
        tries.append(1)
        thread_create(agent=alice.agent, external_id=f"{name}-{len(tries)}")
        if len(tries) < retry.ATTEMPTS:
            _raise_deadlock()
        return name

    assert rename(name="t") == "t"
    assert len(tries) == retry.ATTEMPTS
    assert list(Thread.objects.filter(agent=alice.agent).values_list("external_id", flat=True)) == [
        f"t-{retry.ATTEMPTS}"
    ]


def test_a_lock_conflict_on_every_try_is_a_busy_error_and_changes_nothing(alice: Caller) -> None:
    @retry.atomic_retrying
    def doomed() -> None:
        thread_create(agent=alice.agent, external_id="never")
        _raise_deadlock()

    with pytest.raises(retry.Busy) as raised:
        doomed()
    assert raised.value.status == 503 and raised.value.code == "busy"
    assert isinstance(raised.value.__cause__, OperationalError)
    assert not Thread.objects.filter(external_id="never").exists()


def test_other_database_errors_are_not_tried_again(alice: Caller) -> None:
    tries: list[int] = []

    @retry.atomic_retrying
    def broken() -> None:
        tries.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1/0")

    with pytest.raises(Exception) as raised:
        broken()
    assert not isinstance(raised.value, retry.Busy)
    assert tries == [1]
