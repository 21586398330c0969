"""A staff erasure request whose worker is killed (kill -9, as out of memory or a lost host would)
in the middle of the erasure: its `except` never runs, so the request said `running` for ever.
The erasure beat finds its job run no longer running (the run's advisory lock free: its process
is gone), fails the request as a transient error (audited, its page saying when it runs again),
and runs it again after its wait; the run takes what is left and nothing of the person stays.

A real `celery worker` process (tests.kit.faults) runs the job; the test holds her thread's row,
so the worker is surely inside the erasure (its first steps committed, the thread step waiting)
when it is killed. Marked `fault`."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction

from governance.erasure.services import erasure_request_file
from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.tasks import erasures_resume_tick
from memoryapp.models import Entry, ErasureMark, Thread
from tests.forgetting.test_index_races import WAIT
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.erasing import held_by_another_process
from tests.kit.faults import Worker, broker_at, private_redis, wait_for
from tests.kit.mentions import CARL_SAYS, EMAIL, IDENTIFIERS, NAME, PERSON, PHONE, plant, rows_naming_her

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

# The policy docs/governance.md states (AUTO_RETRY_WAITS, AUTO_RETRY_ACTOR of the service).
FIRST_WAIT = timedelta(minutes=5)
AUTO_RETRY_ACTOR = "erasure:auto-retry"
Status = ErasureRequest.Status


@contextmanager
def _her_thread_held() -> Iterator[None]:
    """Her thread's row locked, as a writer appending to it holds it: the erasure's thread step waits."""
    with transaction.atomic():
        Thread.objects.select_for_update().get(external_id="t-ines", user_id=PERSON)
        yield


def _someone_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return bool(cursor.fetchone()[0])


def _status(request: ErasureRequest) -> str:
    return str(ErasureRequest.objects.values_list("status", flat=True).get(pk=request.pk))


def _page(request: ErasureRequest) -> str:
    officer = staff_client(permissions=["view_erasurerequest", "change_erasurerequest"])
    return officer.get(f"/admin/governance/erasurerequest/{request.pk}/change/").content.decode()


def test_a_request_whose_worker_is_killed_mid_erasure_is_failed_by_the_beat_and_run_again_to_its_end(
    alice: Caller, settings: Any
) -> None:
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json")
    assert answer.status_code == 200, answer.content
    plant(alice)  # eagerly embedded and extracted, before the broker is switched
    with private_redis() as redis_server, broker_at(redis_server.url, settings):
        side, release = held_by_another_process(_her_thread_held)
        worker = Worker(redis_url=redis_server.url, queues="governance")
        try:
            with transaction.atomic():
                request = erasure_request_file(user_id=PERSON, identifiers=[EMAIL, PHONE, NAME], actor="staff:pat")
            wait_for(
                "the erasure to be inside its steps, waiting on her thread",
                lambda: _status(request) == Status.RUNNING and _someone_waits_on_a_lock(),
            )
            request.refresh_from_db()
            assert request.phase == "erasing" and ErasureMark.objects.filter(user_id=PERSON).exists()
            worker.kill_all()
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{worker.log_tail()}") from None
        finally:
            release.set()
            side.join(WAIT)
            worker.stop()
        run = JobRun.objects.get(pk=request.job_run_id)
        assert run.status == JobRun.Status.RUNNING and _status(request) == Status.RUNNING  # nothing said otherwise

        # The beat: once PostgreSQL has freed the dead worker's lock, the request is failed, transient.
        wait_for("the beat to find the run dead", lambda: erasures_resume_tick() or _status(request) == Status.FAILED)
        request.refresh_from_db()
        assert request.error.startswith("WorkerLostError: "), request.error
        assert JobRun.objects.get(pk=run.pk).status == JobRun.Status.FAILED
        assert AuditRecord.objects.filter(action="erasure.failed", subject=str(request.pk)).count() == 1
        assert "automatic retry 1 of 3" in _page(request)
        erasures_resume_tick()
        assert _status(request) == Status.FAILED  # not before its wait

        ErasureRequest.objects.filter(pk=request.pk).update(finished_at=request.finished_at - FIRST_WAIT)
        restarted = Worker(redis_url=redis_server.url, queues="governance")
        try:
            erasures_resume_tick()
            wait_for("the retry to end", lambda: _status(request) not in (Status.QUEUED, Status.RUNNING))
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{restarted.log_tail()}") from None
        finally:
            restarted.stop()
    request.refresh_from_db()
    assert request.status == Status.DONE, request.error
    assert AuditRecord.objects.filter(action="erasure.retry", actor=AUTO_RETRY_ACTOR).count() == 1
    # No table holds her (the files' scan also reads this test's own database's WAL under VAR_DIR).
    assert request.report["scan"]["findings"] == []
    left = rows_naming_her()
    left.pop(ErasureRequest._meta.db_table, None)
    assert left == {}
    assert not Thread.objects.filter(user_id=PERSON).exists()
    assert not ErasureMark.objects.filter(user_id=PERSON).exists()
    carl = Entry.objects.filter(agent=alice.agent, thread__external_id="t-carl")
    assert CARL_SAYS in [entry.text for entry in carl]  # another person's words whole


def test_a_request_whose_pool_process_is_killed_mid_erasure_goes_on_at_once_to_its_end(
    alice: Caller, settings: Any
) -> None:
    """kill -9 of the pool process alone (what the out-of-memory killer picks): its message comes
    back (acks_late + reject_on_worker_lost), the next pool process claims the run once the dead
    one's lock is gone, and the erasure goes on from what is left, no beat needed: one job run,
    two attempts, nothing of her left."""
    answer = alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json")
    assert answer.status_code == 200, answer.content
    plant(alice)
    with private_redis() as redis_server, broker_at(redis_server.url, settings):
        side, release = held_by_another_process(_her_thread_held)
        worker = Worker(redis_url=redis_server.url, queues="governance")
        try:
            with transaction.atomic():
                request = erasure_request_file(user_id=PERSON, identifiers=[EMAIL, PHONE, NAME], actor="staff:pat")
            wait_for(
                "the erasure to be inside its steps, waiting on her thread",
                lambda: _status(request) == Status.RUNNING and _someone_waits_on_a_lock(),
            )
            [pool_process] = worker.pool_processes()
            os.kill(pool_process, signal.SIGKILL)
            release.set()
            side.join(WAIT)
            wait_for("the request to end", lambda: _status(request) not in (Status.QUEUED, Status.RUNNING))
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{worker.log_tail()}") from None
        finally:
            release.set()
            side.join(WAIT)
            worker.stop()
    request.refresh_from_db()
    assert request.status == Status.DONE, request.error
    assert JobRun.objects.get(pk=request.job_run_id).attempts == 2
    assert request.report["scan"]["findings"] == []
    left = rows_naming_her()
    left.pop(ErasureRequest._meta.db_table, None)
    assert left == {}
    assert not ErasureMark.objects.filter(user_id=PERSON).exists()
