"""A failed erasure request is run again automatically when its error passes by itself (the
database down, a connection cut): bounded (governance.erasure.services.AUTO_RETRY_WAITS), each try
after its wait, shown on the request's page; any other error is not, and the page says why."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from governance.erasure import services
from governance.erasure.services import erasure_request_file, erasure_request_retry, erasure_requests_retry_due
from governance.jobs.runs import run_lock_release, run_lock_try
from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.tasks import erasure_job, erasures_resume_tick
from memoryapp.models import Thread
from tests.kit.admin import staff_client
from tests.kit.api import Caller
from tests.kit.erasing import held_by_another_process
from tests.kit.faults import wait_for
from tests.kit.mentions import PERSON, her_thread

pytestmark = pytest.mark.django_db(transaction=True)

# The policy docs/governance.md states (AUTO_RETRY_WAITS, AUTO_RETRY_ACTOR of the service).
AUTO_RETRY_WAITS = (timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=2))
AUTO_RETRY_ACTOR = "erasure:auto-retry"


def _page(request: ErasureRequest) -> str:
    officer = staff_client(permissions=["view_erasurerequest", "change_erasurerequest"])
    return officer.get(f"/admin/governance/erasurerequest/{request.pk}/change/").content.decode()


def _failing(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def fails(**_: Any) -> Any:
        raise error

    monkeypatch.setattr(services, "person_erase", fails)


def _waited(request: ErasureRequest, wait: timedelta) -> None:
    """As if `wait` (and a minute) had passed since it failed."""
    request.refresh_from_db()
    assert request.finished_at is not None
    ErasureRequest.objects.filter(pk=request.pk).update(finished_at=request.finished_at - wait - timedelta(minutes=1))


def _failed(caller: Caller, monkeypatch: pytest.MonkeyPatch, capture: Any, error: Exception) -> ErasureRequest:
    """Her thread, and a staff request to erase her whose run failed with `error` (still failing)."""
    her_thread(caller)
    _failing(monkeypatch, error)
    with capture(execute=True):
        erasure_request_file(user_id=PERSON, actor="staff:pat")
    request = ErasureRequest.objects.get(user_id=PERSON)
    assert request.status == ErasureRequest.Status.FAILED
    return request


def _tick(request: ErasureRequest, capture: Any) -> ErasureRequest.Status:
    """The beat's tick (its jobs run), then the request's status."""
    with capture(execute=True):
        erasures_resume_tick()
    request.refresh_from_db()
    return ErasureRequest.Status(request.status)


def test_a_request_failed_on_the_database_is_run_again_after_its_wait(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    capture = django_capture_on_commit_callbacks
    request = _failed(alice, monkeypatch, capture, OperationalError("the database system is shutting down"))
    monkeypatch.undo()
    # Before: nothing ran it again, and the page said nothing of it.
    page = _page(request)
    assert 'id="er-auto-retry"' in page and f"automatic retry 1 of {len(AUTO_RETRY_WAITS)}" in page
    # Not before its wait.
    assert _tick(request, capture) == ErasureRequest.Status.FAILED

    _waited(request, AUTO_RETRY_WAITS[0])
    assert _tick(request, capture) == ErasureRequest.Status.DONE, request.error
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()
    assert AuditRecord.objects.filter(action="erasure.retry", actor=AUTO_RETRY_ACTOR).count() == 1


def test_automatic_retries_are_bounded_and_the_page_says_when_they_stopped(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    capture = django_capture_on_commit_callbacks
    request = _failed(alice, monkeypatch, capture, OperationalError("could not connect to server"))
    for wait in AUTO_RETRY_WAITS:
        _waited(request, wait)
        assert _tick(request, capture) == ErasureRequest.Status.FAILED
    assert AuditRecord.objects.filter(action="erasure.retry", actor=AUTO_RETRY_ACTOR).count() == len(AUTO_RETRY_WAITS)
    _waited(request, timedelta(days=30))
    assert _tick(request, capture) == ErasureRequest.Status.FAILED
    assert AuditRecord.objects.filter(action="erasure.retry", actor=AUTO_RETRY_ACTOR).count() == len(AUTO_RETRY_WAITS)
    page = _page(request)
    assert "Not run again automatically any more" in page and 'id="er-retry"' in page


def test_a_request_failed_on_another_error_is_not_run_again_and_the_page_says_why(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    request = _failed(alice, monkeypatch, django_capture_on_commit_callbacks, ValueError("a defect"))
    _waited(request, timedelta(days=30))
    assert _tick(request, django_capture_on_commit_callbacks) == ErasureRequest.Status.FAILED
    page = _page(request)
    assert "Not run again automatically: ValueError is not an error that passes by itself" in page


def _a_session_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        # pg_locks, not pg_stat_activity: the latter is a snapshot taken once per transaction.
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return bool(cursor.fetchone()[0])


def test_a_retry_due_when_the_beat_looked_waits_when_the_officers_own_retry_failed_meanwhile(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """The race made deterministic: the beat reads the request due (failed once, its first wait
    over), then the officer's own retry, holding the row, runs it again and it fails again. The
    beat, getting the row, decides again: its next wait (the second) starts now, not yet due."""
    capture = django_capture_on_commit_callbacks
    request = _failed(alice, monkeypatch, capture, OperationalError("could not connect to server"))
    _waited(request, AUTO_RETRY_WAITS[0])  # due, as the beat reads it
    sent: list[int] = []

    def beat() -> None:
        try:
            sent.append(erasure_requests_retry_due())
        finally:
            connection.close()

    looking = threading.Thread(target=beat)
    with transaction.atomic():
        # The officer's retry has the row (erasure_request_retry locks it first) when the beat looks.
        ErasureRequest.objects.select_for_update().get(pk=request.pk)
        looking.start()
        wait_for("the beat to have read the request and wait for its row", _a_session_waits_on_a_lock)
        erasure_request_retry(request=request, actor="staff:pat")
        request.refresh_from_db()
        with pytest.raises(OperationalError):
            erasure_job(request.job_run_id)  # the officer's run fails again (person_erase still fails)
    looking.join(timeout=60)
    assert not looking.is_alive()
    request.refresh_from_db()
    assert sent == [0]
    assert request.status == ErasureRequest.Status.FAILED
    assert not AuditRecord.objects.filter(action="erasure.retry", actor=AUTO_RETRY_ACTOR).exists()
    assert f"automatic retry 2 of {len(AUTO_RETRY_WAITS)}" in _page(request)
    # Its second wait over, the beat runs it.
    monkeypatch.undo()
    _waited(request, AUTO_RETRY_WAITS[1])
    assert _tick(request, capture) == ErasureRequest.Status.DONE, request.error


def _running_with(run: JobRun) -> ErasureRequest:
    """A request that says it runs, on job run `run` (its worker's `except` never ran)."""
    return ErasureRequest.objects.create(user_id=PERSON, status="running", phase="erasing", job_run=run)


def test_a_request_whose_run_ended_past_its_time_limit_is_failed_by_the_beat_and_run_again(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    her_thread(alice)
    killed = JobRun.objects.create(
        kind="erasure", status="failed", arguments={}, error="time limit of 1800 s exceeded: the worker stopped the job"
    )
    request = _running_with(killed)
    assert _tick(request, django_capture_on_commit_callbacks) == ErasureRequest.Status.FAILED
    assert request.error.startswith("TimeLimitExceeded: ")
    assert AuditRecord.objects.filter(action="erasure.failed", subject=str(request.pk)).count() == 1
    assert "automatic retry 1 of 3" in _page(request)
    _waited(request, AUTO_RETRY_WAITS[0])
    assert _tick(request, django_capture_on_commit_callbacks) == ErasureRequest.Status.DONE, request.error
    assert not Thread.objects.filter(agent=alice.agent, user_id=PERSON).exists()


@contextmanager
def _run_held(run: JobRun) -> Iterator[None]:
    """The run's lock held by another session, as the live process running it holds it."""
    assert run_lock_try(run.pk)
    try:
        yield
    finally:
        run_lock_release(run.pk)


def test_a_running_request_whose_worker_lives_is_left_alone_however_long_it_runs(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    her_thread(alice)
    run = JobRun.objects.create(kind="erasure", status="running", arguments={}, attempts=1)
    request = _running_with(run)
    ErasureRequest.objects.filter(pk=request.pk).update(started_at=timezone.now() - timedelta(days=2))
    side, release = held_by_another_process(lambda: _run_held(run))
    try:
        assert _tick(request, django_capture_on_commit_callbacks) == ErasureRequest.Status.RUNNING
        assert JobRun.objects.get(pk=run.pk).status == JobRun.Status.RUNNING
    finally:
        release.set()
        side.join(60)
    # Its process gone (the lock free), the beat fails it, transient.
    assert _tick(request, django_capture_on_commit_callbacks) == ErasureRequest.Status.FAILED
    assert request.error.startswith("WorkerLostError: ")
    assert JobRun.objects.get(pk=run.pk).status == JobRun.Status.FAILED
