from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from governance import locks
from governance.audit.chain import audit_append
from governance.jobs import runs, sweep
from governance.jobs.broker import (
    broker_breaker_reset,
    broker_epoch_mark,
    broker_redis,
    debounce_mark,
    job_debounce_clear,
    job_enqueue,
    job_enqueue_debounced,
)
from governance.jobs.declare import job
from governance.jobs.runs import (
    WAITING_NOTE,
    job_add_usage,
    job_fail,
    job_progress,
    job_run,
    job_skip,
    job_start,
    job_task,
)
from governance.jobs.schedules import SCHEDULES
from governance.jobs.sweep import jobs_waiting
from governance.models import JobRun
from governance.tasks import audit_verify_job, jobs_sweep
from memory_project.celery import app
from memoryapp.llm.scripted import set_script
from memoryapp.models import Entry, Thread
from memoryapp.search.indexing import embedding_debounce_key
from memoryapp.tasks.embedding import embed_sweep
from tests.kit.factories import EntryFactory, ThreadFactory
from tests.kit.faults import broker_at

# Nothing listens there: a broker that is away (connections refused at once).
DEAD_BROKER = "redis://127.0.0.1:1/0"


class Busy(Exception):
    """A transient error, as an embedder or a model that is overloaded for a moment."""


@job(name="tests.jobs.busy_once", queue="governance", transient=(Busy,), retries=2, backoff=1, backoff_max=1)
def busy_once(run: JobRun) -> dict[str, Any]:
    if run.attempts == 1:
        raise Busy("busy for a moment")
    return {"done_at_attempt": run.attempts}


@job(name="tests.jobs.always_busy", queue="governance", transient=(Busy,), retries=2, backoff=1, backoff_max=1)
def always_busy(run: JobRun) -> None:
    raise Busy(f"still busy at attempt {run.attempts}")


@job(name="tests.jobs.broken", queue="governance", transient=(Busy,), retries=2, backoff=1, backoff_max=1)
def broken(run: JobRun) -> None:
    raise ValueError("not a transient error")


@job(name="tests.jobs.time_limited", queue="governance", time_limit=60)
def time_limited(run: JobRun) -> dict[str, Any]:
    return {"done": True}


@pytest.mark.django_db
def test_job_run_records_start_progress_and_result(settings) -> None:
    settings.LLM_PRICE_INPUT_PER_MTOK = 3.0
    settings.LLM_PRICE_OUTPUT_PER_MTOK = 15.0
    run = JobRun.objects.create(kind="test", arguments={"n": 3})

    def work(r: JobRun) -> dict[str, int]:
        for done in range(1, 4):
            job_progress(r, done=done, total=3)
        job_add_usage(r, input_tokens=100, output_tokens=20, latency_ms=12.5)
        job_add_usage(r, input_tokens=50, output_tokens=5, latency_ms=2.5)
        return {"items": 3}

    job_run(run.pk, work)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.result == {"items": 3}
    assert (run.progress_done, run.progress_total, run.attempts) == (3, 3, 1)
    assert run.usage == {"calls": 2, "input_tokens": 150, "output_tokens": 25, "latency_ms": 15.0, "cost_usd": 0.000825}
    assert run.started_at and run.finished_at and run.finished_at >= run.started_at


@pytest.mark.django_db
def test_job_run_records_failure_and_reraises() -> None:
    run = JobRun.objects.create(kind="test")

    def work(r: JobRun) -> None:
        raise ValueError("model answered nonsense")

    with pytest.raises(ValueError):
        job_run(run.pk, work)
    run.refresh_from_db()
    assert run.status == "failed" and "model answered nonsense" in run.error


@pytest.mark.django_db
def test_finished_job_is_not_started_again() -> None:
    run = JobRun.objects.create(kind="test")
    job_run(run.pk, lambda r: {"done": True})
    assert job_start(run.pk) is None  # a redelivered message finds it finished
    calls = []
    job_run(run.pk, lambda r: calls.append(1) or {})
    assert calls == []


@pytest.mark.django_db
def test_skip_and_fail_helpers() -> None:
    run = JobRun.objects.create(kind="test")
    job_run(run.pk, lambda r: job_skip(r, "no language model configured") and None)
    run.refresh_from_db()
    assert run.status == "skipped" and run.result == {"skipped": "no language model configured"}
    other = JobRun.objects.create(kind="test")
    job_fail(other, "boom")
    other.refresh_from_db()
    assert other.status == "failed" and other.error == "boom"


@pytest.mark.django_db(transaction=True)
def test_enqueue_runs_after_commit_and_dedupes_queued_runs() -> None:
    audit_append(action="x")
    with transaction.atomic():
        run = job_enqueue(kind="audit_verify", task_name=audit_verify_job.name, arguments={})
        run.refresh_from_db()
        assert run.status == "queued"  # not sent before the commit
    run.refresh_from_db()
    assert run.status == "succeeded" and (run.result["records"], run.result["ok"]) == (1, True)

    # A run still queued under the same key is reused (checked inside one transaction, before commit).
    with transaction.atomic():
        first = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="verify")
        second = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="verify")
        assert first.pk == second.pk


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_on_redis_runs_the_job(settings) -> None:
    """The job goes through the real broker (Redis) to a real Celery worker thread."""
    app.conf.task_always_eager = False
    try:
        with start_worker(app, perform_ping_check=False, queues=["governance"], pool="solo", shutdown_timeout=10):
            run = job_enqueue(kind="audit_verify", task_name=audit_verify_job.name, arguments={})
            for _ in range(100):
                run.refresh_from_db()
                if run.status in ("succeeded", "failed"):
                    break
                time.sleep(0.1)
    finally:
        app.conf.task_always_eager = True
    assert run.status == "succeeded", (run.status, run.error)


@pytest.mark.django_db(transaction=True)
def test_debounced_enqueue_sends_one_run_while_one_is_pending() -> None:
    job_debounce_clear("verify-debounce")
    app.conf.task_always_eager = False  # keep the run pending: nothing consumes queue `governance` here
    try:
        first = job_enqueue_debounced(
            kind="k", task_name=audit_verify_job.name, arguments={}, debounce_key="verify-debounce"
        )
        second = job_enqueue_debounced(
            kind="k", task_name=audit_verify_job.name, arguments={}, debounce_key="verify-debounce"
        )
        assert first is not None and second is None
        assert JobRun.objects.filter(dedupe_key="verify-debounce").count() == 1
        job_debounce_clear("verify-debounce")  # what the job does as it starts
        third = job_enqueue_debounced(
            kind="k", task_name=audit_verify_job.name, arguments={}, debounce_key="verify-debounce"
        )
        assert third is not None
    finally:
        app.conf.task_always_eager = True
        job_debounce_clear("verify-debounce")
        broker_redis().delete("governance")  # the queue's list: leave no message for a later worker


@pytest.mark.django_db(transaction=True)
def test_a_write_succeeds_when_the_broker_is_down(alice, settings) -> None:
    """The entry is committed; a broker that cannot take the embedding job is logged, not a 500,
    and the run stays queued, marked as never handed over."""
    alice.client.post("/api/v1/threads", {"id": "t-broker"}, format="json")
    with broker_at(DEAD_BROKER, settings):
        response = alice.client.post(
            "/api/v1/threads/t-broker/entries", {"role": "user", "content": "hello"}, format="json"
        )
    assert response.status_code == 201, response.content
    assert Entry.objects.filter(thread__external_id="t-broker").count() == 1
    run = JobRun.objects.get(kind="embedding")
    assert run.status == "queued" and run.sent_at is None and run.task_name == "memoryapp.tasks.embed_pending"


@pytest.mark.django_db(transaction=True)
def test_a_write_while_the_broker_is_away_still_leaves_its_extraction_run_to_be_sent(alice, settings) -> None:
    """The extraction debounce mark cannot be set without Redis: the run is created anyway, unsent."""
    alice.client.post("/api/v1/threads", {"id": "t-extract-away"}, format="json")
    set_script(lambda system, messages: "[]")
    try:
        with broker_at(DEAD_BROKER, settings):
            response = alice.client.post(
                "/api/v1/threads/t-extract-away/entries", {"role": "user", "content": "I moved to Lyon"}, format="json"
            )
    finally:
        set_script(None)
    assert response.status_code == 201, response.content
    run = JobRun.objects.get(kind="extraction")
    assert run.status == "queued" and run.sent_at is None and run.task_name == "memoryapp.tasks.extract_thread"


@pytest.mark.django_db(transaction=True)
def test_async_compact_and_extract_answer_202_when_the_broker_is_away(alice, settings) -> None:
    """Their run is committed before the send: a refused send must not turn the answer into a 500."""

    thread = ThreadFactory(agent=alice.agent, external_id="t-away")
    for i in range(4):
        EntryFactory(thread=thread, role="user", content=f"question {i}")
        EntryFactory(thread=thread, role="assistant", content=f"answer {i}")
    with broker_at(DEAD_BROKER, settings):
        compact = alice.client.post(
            "/api/v1/threads/t-away/compact", {"strategy": "summarize-old-preserve-recent"}, format="json"
        )
        extract = alice.client.post("/api/v1/threads/t-away/extract", {}, format="json")
    assert compact.status_code == 202, compact.content
    assert extract.status_code == 202, extract.content
    for answer in (compact, extract):
        run = JobRun.objects.get(pk=answer.json()["job_run"]["id"])
        assert run.status == "queued" and run.sent_at is None


@pytest.mark.django_db(transaction=True)
def test_a_write_answers_when_the_broker_takes_connections_but_never_replies(alice, settings) -> None:
    """A broker that hangs (half-open, overloaded) costs a write the broker timeouts, not forever."""
    ThreadFactory(agent=alice.agent, external_id="t-hung")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections complete in the kernel's backlog; nothing ever answers
    answers: list[int] = []
    with broker_at(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", settings):

        def ask() -> None:
            try:
                answer = alice.client.post("/api/v1/threads/t-hung/extract", {}, format="json")
                answers.append(answer.status_code)
            finally:
                connection.close()

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        asking.join(timeout=120)  # a generous deadline: a hang is what fails, not a slow answer
    silent.close()
    assert answers == [202]


@pytest.mark.django_db
def test_the_next_enqueue_of_a_key_hands_its_never_sent_run_to_the_broker_again(
    settings, django_capture_on_commit_callbacks
) -> None:
    with broker_at(DEAD_BROKER, settings), django_capture_on_commit_callbacks(execute=True):
        first = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="verify-again")
    first.refresh_from_db()
    assert first.status == "queued" and first.sent_at is None
    # The broker is back (eager: the task runs as the broker hands it to a worker), and this
    # process's rest from it after the failure (BROKER_BREAKER_SECONDS) is over.
    broker_breaker_reset()
    with django_capture_on_commit_callbacks(execute=True):
        second = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="verify-again")
    assert second.pk == first.pk
    first.refresh_from_db()
    assert first.status == "succeeded" and first.sent_at is not None


def _broker_lost_its_data_at(moment: datetime) -> None:
    """As if Redis had restarted empty and the sweep had noticed at `moment` (governance.jobs.broker.broker_epoch)."""
    broker_redis().set(broker_epoch_mark(), moment.isoformat())


@pytest.mark.django_db
def test_the_job_sweep_sends_runs_the_broker_never_took_or_lost(settings) -> None:
    with broker_at(DEAD_BROKER, settings), transaction.atomic():
        unsent = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="unsent")
    _broker_lost_its_data_at(timezone.now() - timedelta(minutes=30))
    lost = JobRun.objects.create(kind="k", task_name=audit_verify_job.name, sent_at=timezone.now() - timedelta(hours=1))
    waiting = JobRun.objects.create(
        kind="k",
        task_name=audit_verify_job.name,
        sent_at=timezone.now(),
        next_check_at=timezone.now() + timedelta(minutes=10),
    )
    in_request = JobRun.objects.create(kind="k")  # done in the asking process: no task to send
    old = timezone.now() - timedelta(minutes=5)
    JobRun.objects.filter(pk__in=[unsent.pk, in_request.pk]).update(created_at=old)

    jobs_sweep()

    statuses = dict(JobRun.objects.values_list("pk", "status"))
    assert statuses[unsent.pk] == "succeeded"  # never taken by the broker
    assert statuses[lost.pk] == "succeeded"  # taken before the broker lost its data: its message went with it
    assert statuses[waiting.pk] == "queued"  # just sent: still on its way
    assert statuses[in_request.pk] == "queued"


@pytest.mark.django_db
def test_the_job_sweep_never_sends_a_run_before_its_countdown_ends(
    settings, django_capture_on_commit_callbacks
) -> None:
    """A debounced extraction sent with a countdown longer than JOB_RESEND_AFTER_SECONDS must not be
    started early by the sweep, whether the broker took it, lost it, or never took it."""
    settings.JOB_UNSENT_GRACE_SECONDS = 0
    with broker_at(DEAD_BROKER, settings), django_capture_on_commit_callbacks(execute=True):
        never_taken = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, countdown=900)
    _broker_lost_its_data_at(timezone.now() - timedelta(minutes=1))
    an_hour_ago = timezone.now() - timedelta(hours=1)
    counting_down = JobRun.objects.create(
        kind="k",
        task_name=audit_verify_job.name,
        sent_at=an_hour_ago,
        eta=timezone.now() + timedelta(minutes=5),  # sent with a countdown of 65 minutes
        next_check_at=an_hour_ago,
    )

    counts = sweep.jobs_sweep()

    for run in (never_taken, counting_down):
        run.refresh_from_db()
        assert run.status == "queued" and run.resends == 0, (run.status, run.error)
    assert never_taken.sent_at is None and never_taken.eta is not None
    assert counts["sent"] == counts["resent"] == 0

    JobRun.objects.filter(pk__in=[never_taken.pk, counting_down.pk]).update(eta=timezone.now() - timedelta(seconds=1))
    sweep.jobs_sweep()  # the countdowns ended: the one never taken and the one the broker lost are sent
    assert set(JobRun.objects.filter(pk__in=[never_taken.pk, counting_down.pk]).values_list("status", flat=True)) == {
        "succeeded"
    }


def _governance_queue() -> list[bytes]:
    return list(broker_redis().lrange("governance", 0, -1))


@pytest.fixture
def governance_queue_without_consumer(settings):
    """Jobs of queue `governance` sent to the real Redis of this test run, which no worker consumes."""
    broker_redis().delete("governance")
    with broker_at(settings.CELERY_BROKER_URL, settings):
        yield
    broker_redis().delete("governance")  # leave no message for a later worker


def _taken_long_ago(run: JobRun, *, minutes: int) -> None:
    """As if the broker had taken the run `minutes` ago and the sweep's next look were due."""
    JobRun.objects.filter(pk=run.pk).update(
        sent_at=timezone.now() - timedelta(minutes=minutes), next_check_at=timezone.now() - timedelta(seconds=1)
    )


@pytest.mark.django_db
def test_a_run_no_worker_takes_is_not_sent_again_while_its_queue_holds_messages_and_says_so(
    governance_queue_without_consumer, django_capture_on_commit_callbacks
) -> None:
    """A queue no worker consumes (or a backlog): every look of the sweep used to add one more copy
    of every waiting run to Redis; the run's message is still there, so none is added, and the run
    says what it waits for."""
    _broker_lost_its_data_at(timezone.now() - timedelta(days=1))  # the broker kept everything since
    with django_capture_on_commit_callbacks(execute=True):
        run = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={})
    run.refresh_from_db()
    assert run.sent_at is not None and len(_governance_queue()) == 1

    for minutes in (11, 30, 70, 150, 310):
        _taken_long_ago(run, minutes=minutes)
        jobs_sweep()
        assert len(_governance_queue()) == 1
    run.refresh_from_db()
    assert run.status == "queued" and run.resends == 0
    assert run.error.startswith("not taken by any worker of queue governance since "), run.error
    assert "1 message(s) wait in that queue" in run.error
    # Looked at again after a wait as long as it has waited so far (310 minutes), not every minute.
    assert run.next_check_at is not None and run.next_check_at > timezone.now() + timedelta(minutes=300)


@pytest.mark.django_db
def test_the_job_sweep_sends_a_run_whose_message_is_gone_again_at_most_job_resend_max_times(
    settings, governance_queue_without_consumer, django_capture_on_commit_callbacks
) -> None:
    """With its queue empty and the broker's data kept, a run not started was dropped by a worker (or
    is reserved by a busy one): it is sent again, a bounded number of times, then only noted."""
    settings.JOB_RESEND_MAX = 2
    _broker_lost_its_data_at(timezone.now() - timedelta(days=1))
    with django_capture_on_commit_callbacks(execute=True):
        run = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={})
    copies = []
    for minutes in (11, 30, 70, 150):
        broker_redis().delete("governance")  # a worker took the message and dropped it
        _taken_long_ago(run, minutes=minutes)
        jobs_sweep()
        copies.append(len(_governance_queue()))
    run.refresh_from_db()
    assert copies == [1, 1, 0, 0]
    assert run.status == "queued" and run.resends == 2
    assert run.error.startswith("not taken by any worker of queue governance since ")
    assert "the most (JOB_RESEND_MAX)" in run.error

    # A worker takes it at last: it runs, and the note goes.
    settings.CELERY_TASK_ALWAYS_EAGER = True
    job_run(run.pk, lambda r: {"done": True}, message_id="late")
    run.refresh_from_db()
    assert run.status == "succeeded" and run.error == ""


@pytest.mark.django_db
def test_jobs_waiting_counts_runs_no_worker_took_per_queue(settings) -> None:
    long_ago = timezone.now() - timedelta(hours=2)
    JobRun.objects.create(kind="k", task_name=audit_verify_job.name, sent_at=long_ago)
    JobRun.objects.create(kind="k", task_name=audit_verify_job.name, sent_at=timezone.now())  # on its way
    JobRun.objects.create(  # still counting down
        kind="k", task_name=audit_verify_job.name, sent_at=long_ago, eta=timezone.now() + timedelta(minutes=5)
    )
    assert jobs_waiting() == [{"queue": "governance", "task": audit_verify_job.name, "runs": 1, "since": long_ago}]


@pytest.mark.django_db
def test_the_job_runs_admin_lists_the_runs_no_worker_took(admin_client) -> None:
    waiting = JobRun.objects.create(
        kind="waiting-kind", task_name=audit_verify_job.name, error=f"{WAITING_NOTE} governance since ..."
    )
    other = JobRun.objects.create(kind="other-kind", task_name=audit_verify_job.name)
    page = admin_client.get("/admin/governance/jobrun/", {"not_taken": "yes"}).content.decode()
    assert f"/admin/governance/jobrun/{waiting.pk}/change/" in page
    assert f"/admin/governance/jobrun/{other.pk}/change/" not in page


@pytest.mark.django_db
def test_after_a_failed_send_writes_skip_the_broker_for_a_while_and_the_sweep_still_sends(
    settings, governance_queue_without_consumer, django_capture_on_commit_callbacks
) -> None:
    settings.JOB_UNSENT_GRACE_SECONDS = 0
    with broker_at(DEAD_BROKER, settings), django_capture_on_commit_callbacks(execute=True):
        refused = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="first")
    # The broker is back, but this process rests from it for BROKER_BREAKER_SECONDS.
    with django_capture_on_commit_callbacks(execute=True):
        skipped = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="second")
    for run in (refused, skipped):
        run.refresh_from_db()
        assert run.status == "queued" and run.sent_at is None
    assert _governance_queue() == []

    jobs_sweep()  # the sweep always asks the broker
    assert len(_governance_queue()) == 2
    assert not JobRun.objects.filter(sent_at__isnull=True).exists()
    with django_capture_on_commit_callbacks(execute=True):  # it answered: the breaker is closed
        sent = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="third")
    sent.refresh_from_db()
    assert sent.sent_at is not None and len(_governance_queue()) == 3


@pytest.mark.django_db
def test_with_broker_breaker_seconds_zero_every_send_asks_the_broker(
    settings, governance_queue_without_consumer, django_capture_on_commit_callbacks
) -> None:
    settings.BROKER_BREAKER_SECONDS = 0
    with broker_at(DEAD_BROKER, settings), django_capture_on_commit_callbacks(execute=True):
        job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="first")
    with django_capture_on_commit_callbacks(execute=True):
        run = job_enqueue(kind="k", task_name=audit_verify_job.name, arguments={}, dedupe_key="second")
    run.refresh_from_db()
    assert run.sent_at is not None and len(_governance_queue()) == 1


@pytest.mark.django_db(transaction=True)
def test_a_hung_broker_costs_one_write_its_timeout_not_every_write(alice, settings) -> None:
    """A broker that takes connections and never answers: the first write waits for it (and answers
    201), the next ones do not ask it at all while the breaker rests; their runs stay for the sweep."""
    ThreadFactory(agent=alice.agent, external_id="t-hung")
    settings.BROKER_TIMEOUT = 0.5  # the Redis client of the debounce marks is made inside broker_at
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    set_script(lambda system, messages: "[]")  # a model: each write also schedules its extraction
    answers, connections = [], []
    try:
        with broker_at(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", settings):
            for i in range(4):
                answer = alice.client.post(
                    "/api/v1/threads/t-hung/entries", {"role": "user", "content": f"hello {i}"}, format="json"
                )
                answers.append(answer.status_code)
                connections.append(len(accepted))
            extract = alice.client.post("/api/v1/threads/t-hung/extract", {}, format="json")
            connections.append(len(accepted))
    finally:
        set_script(None)
        silent.close()
    assert answers == [201] * 4 and extract.status_code == 202
    assert connections[0] >= 1 and len(set(connections)) == 1, connections  # only the first write asked
    assert not JobRun.objects.filter(sent_at__isnull=False).exists()
    assert set(JobRun.objects.values_list("kind", flat=True)) == {"embedding", "extraction"}


@pytest.mark.django_db
def test_the_job_sweep_leaves_a_just_created_unsent_run_to_its_own_send(settings) -> None:
    settings.JOB_UNSENT_GRACE_SECONDS = 60
    run = JobRun.objects.create(kind="k", task_name=audit_verify_job.name)  # its commit's send is under way
    jobs_sweep()
    run.refresh_from_db()
    assert run.status == "queued" and run.sent_at is None


@pytest.fixture
def other_process():
    """A second database session, standing for another worker process."""
    other = connection.copy()
    yield other
    other.close()


def _hold(session, run: JobRun) -> None:
    with session.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", locks.pair(locks.JOB_RUN, run.pk))


@pytest.mark.django_db
def test_a_second_message_of_a_run_a_live_process_holds_does_not_run_it(other_process, monkeypatch) -> None:
    monkeypatch.setattr(runs, "CLAIM_WAIT_SECONDS", 0.5)
    for status in ("queued", "running"):
        run = JobRun.objects.create(kind="test", status=status, attempts=1 if status == "running" else 0)
        _hold(other_process, run)
        calls: list[int] = []

        def work(r: JobRun, calls: list[int] = calls) -> dict:
            calls.append(1)
            return {}

        assert job_run(run.pk, work) is None
        run.refresh_from_db()
        assert calls == [] and run.status == status


def _release_soon(session, run: JobRun) -> threading.Thread:
    """Free `session`'s lock on the run in a moment, from another thread (as PostgreSQL frees a
    killed worker's lock once it notices its connection closed)."""
    session.inc_thread_sharing()

    def release() -> None:
        time.sleep(1.0)
        with session.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", list(locks.pair(locks.JOB_RUN, run.pk)))

    releasing = threading.Thread(target=release)
    releasing.start()
    return releasing


@pytest.mark.django_db
def test_a_copy_of_a_running_runs_message_is_dropped_at_once_and_only_its_own_message_waits_for_it(
    other_process, monkeypatch
) -> None:
    """A resent copy arriving while its run runs must not hold a pool process for CLAIM_WAIT_SECONDS:
    it is dropped without waiting for the lock (so the lock freed a moment later is not taken). The
    message that claimed the run, brought back by the loss of its worker, waits and takes it over."""
    monkeypatch.setattr(runs, "CLAIM_WAIT_SECONDS", 60.0)
    calls: list[str] = []
    run = JobRun.objects.create(kind="test", status="running", attempts=1, message_id="claimer")

    _hold(other_process, run)
    releasing = _release_soon(other_process, run)
    assert job_run(run.pk, lambda r: calls.append("copy") or {}, message_id="a-resent-copy") is None
    releasing.join()
    run.refresh_from_db()
    assert calls == [] and run.status == "running" and run.attempts == 1

    _hold(other_process, run)
    releasing = _release_soon(other_process, run)
    job_run(run.pk, lambda r: calls.append("claimer") or {}, message_id="claimer")
    releasing.join()
    run.refresh_from_db()
    assert calls == ["claimer"] and run.status == "succeeded" and run.attempts == 2


@pytest.mark.django_db
def test_a_running_run_whose_process_died_is_claimed_by_its_next_message() -> None:
    run = JobRun.objects.create(kind="test", status="running", attempts=1)  # no process holds it
    job_run(run.pk, lambda r: {"done": True})
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 2


@pytest.mark.django_db
def test_the_job_sweep_requeues_runs_whose_worker_died_and_leaves_live_ones(other_process) -> None:
    alive = JobRun.objects.create(kind="k", status="running", attempts=1, task_name=audit_verify_job.name)
    _hold(other_process, alive)
    dead = JobRun.objects.create(kind="k", status="running", attempts=1, task_name=audit_verify_job.name)
    dead_in_request = JobRun.objects.create(kind="k", status="running", attempts=1)
    dying_again = JobRun.objects.create(kind="k", status="running", attempts=5, task_name=audit_verify_job.name)

    jobs_sweep()

    alive.refresh_from_db()
    assert alive.status == "running" and alive.attempts == 1
    dead.refresh_from_db()
    assert dead.status == "succeeded" and dead.attempts == 2  # sent again, and run (eagerly here)
    dead_in_request.refresh_from_db()
    assert dead_in_request.status == "failed" and "stopped" in dead_in_request.error
    dying_again.refresh_from_db()
    assert dying_again.status == "failed" and "died during 5 attempts" in dying_again.error


@pytest.mark.django_db
def test_the_job_sweep_is_scheduled_every_minute() -> None:
    sweep = PeriodicTask.objects.get(task="governance.tasks.jobs_sweep")
    assert sweep.enabled and sweep.interval is not None
    assert (sweep.interval.every, sweep.interval.period) == (1, "minutes")


@pytest.mark.django_db
def test_embed_sweep_embeds_entries_even_while_a_debounce_mark_says_a_run_is_pending(
    alice, django_capture_on_commit_callbacks
) -> None:
    """A mark left by a run that never started must not keep entries without vectors."""
    thread = Thread.objects.create(agent=alice.agent, external_id="t-marked")
    Entry.objects.create(
        agent=alice.agent,
        thread=thread,
        seq=1,
        role="user",
        content="marked",
        text="marked",
        created_at=thread.created_at,
        content_hash="y" * 32,
    )
    key = embedding_debounce_key(alice.agent.pk)
    broker_redis().set(debounce_mark(key), "1", ex=300)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            embed_sweep()
    finally:
        job_debounce_clear(key)
    assert Entry.objects.filter(thread=thread, embedding__isnull=True).count() == 0


@pytest.mark.django_db
def test_embed_sweep_embeds_entries_whose_job_was_never_sent(alice, django_capture_on_commit_callbacks) -> None:
    thread = Thread.objects.create(agent=alice.agent, external_id="t-sweep")
    # Written without the hooks, as if the broker had been down when it was committed.
    Entry.objects.create(
        agent=alice.agent,
        thread=thread,
        seq=1,
        role="user",
        content="lost job",
        text="lost job",
        created_at=thread.created_at,
        content_hash="x" * 32,
    )
    assert Entry.objects.filter(thread=thread, embedding__isnull=True).count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        embed_sweep()
    assert Entry.objects.filter(thread=thread, embedding__isnull=True).count() == 0
    assert PeriodicTask.objects.filter(task="memoryapp.tasks.embed_sweep", enabled=True).exists()


def _enqueued(task_name: str, django_capture_on_commit_callbacks: Any) -> JobRun:
    with django_capture_on_commit_callbacks(execute=True):
        run = job_enqueue(kind="test", task_name=task_name, arguments={})
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_a_job_retries_its_transient_error_and_the_retry_finds_its_run(django_capture_on_commit_callbacks) -> None:
    run = _enqueued("tests.jobs.busy_once", django_capture_on_commit_callbacks)
    assert run.status == "succeeded" and run.attempts == 2 and run.result == {"done_at_attempt": 2}


@pytest.mark.django_db
def test_a_job_whose_transient_error_lasts_fails_after_its_last_retry(django_capture_on_commit_callbacks) -> None:
    run = _enqueued("tests.jobs.always_busy", django_capture_on_commit_callbacks)
    assert run.status == "failed" and run.attempts == 3 and "still busy at attempt 3" in run.error


@pytest.mark.django_db
def test_a_job_fails_at_once_on_an_error_it_does_not_declare_transient(django_capture_on_commit_callbacks) -> None:
    run = _enqueued("tests.jobs.broken", django_capture_on_commit_callbacks)
    assert run.status == "failed" and run.attempts == 1 and "not a transient error" in run.error


@pytest.mark.django_db
def test_a_job_called_directly_runs_once_as_its_last_attempt() -> None:
    """A command that waits for a job calls its task: no retry follows, so the run fails, not queued."""
    run = JobRun.objects.create(kind="test", task_name="tests.jobs.busy_once")
    with pytest.raises(Busy):
        busy_once(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and run.attempts == 1


@pytest.mark.django_db
def test_a_job_declaring_only_a_hard_time_limit_is_sent_and_runs(django_capture_on_commit_callbacks) -> None:
    """The app's soft limit (CELERY_TASK_TIME_LIMIT - 5) passes a shorter hard limit: Celery would
    refuse to send the job at all. Its soft limit is its own hard one, five seconds less."""
    assert (time_limited.time_limit, time_limited.soft_time_limit) == (60, 55)
    run = _enqueued("tests.jobs.time_limited", django_capture_on_commit_callbacks)
    assert run.status == "succeeded" and run.sent_at is not None


def test_a_job_declares_transient_errors_and_retries_together() -> None:
    with pytest.raises(ValueError, match="give both or neither"):
        job(name="tests.jobs.retries_nothing", queue="default", retries=3)
    with pytest.raises(ValueError, match="give both or neither"):
        job(name="tests.jobs.never_retried", queue="default", transient=(Busy,))


@pytest.mark.django_db
def test_enqueueing_a_job_no_app_declares_is_refused_before_anything_is_written() -> None:
    with pytest.raises(LookupError, match="no_such_job"):
        job_enqueue(kind="test", task_name="memoryapp.tasks.no_such_job", arguments={})
    assert not JobRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_retries_a_transient_error_and_the_retry_finds_its_run() -> None:
    """Through Redis: the retry is a new message, sent after a backoff, that claims the same run."""

    app.conf.task_always_eager = False
    try:
        with start_worker(app, perform_ping_check=False, queues=["governance"], pool="solo", shutdown_timeout=10):
            run = job_enqueue(kind="test", task_name="tests.jobs.busy_once", arguments={})
            for _ in range(300):
                run.refresh_from_db()
                if run.status in ("succeeded", "failed"):
                    break
                time.sleep(0.1)
    finally:
        app.conf.task_always_eager = True
    assert run.status == "succeeded" and run.attempts == 2, (run.status, run.error)


# Names and queues of every task: messages already in a broker carry these names, and workers
# are started per queue (CELERY_QUEUES), so neither may change in a release.
TASK_QUEUES = {
    "memoryapp.tasks.embed_pending": "embedding",
    "memoryapp.tasks.embed_all_again": "embedding",
    "memoryapp.tasks.embed_sweep": "embedding",
    "memoryapp.tasks.compact_thread": "extraction",
    "memoryapp.tasks.extract_thread": "extraction",
    "memoryapp.tasks.items_prune_job": "default",
    "memoryapp.tasks.items_prune_tick": "default",
    "memoryapp.tasks.access_log_prune_job": "governance",
    "memoryapp.tasks.access_log_prune_tick": "governance",
    "memoryapp.tasks.webhook_deliver": "default",
    "memoryapp.tasks.webhooks_sweep": "default",
    "memoryapp.tasks.consolidation_dedupe": "consolidation",
    "memoryapp.tasks.consolidation_fold": "consolidation",
    "memoryapp.tasks.consolidation_observations": "consolidation",
    "memoryapp.tasks.consolidation_dedupe_tick": "consolidation",
    "memoryapp.tasks.consolidation_fold_tick": "consolidation",
    "memoryapp.tasks.consolidation_observations_tick": "consolidation",
    "governance.tasks.audit_verify_job": "governance",
    "governance.tasks.jobs_sweep": "governance",
}


def test_every_task_keeps_its_name_and_sends_to_its_queue() -> None:
    """Each task's message lands in the Redis list of its queue (sent for real, consumed by none)."""
    queues = set(TASK_QUEUES.values())
    broker = broker_redis()
    broker.delete(*queues)
    app.conf.task_always_eager = False
    try:
        for name in TASK_QUEUES:
            task = job_task(name)
            assert task is not None, name
            beat_task = name.endswith(("_sweep", "_tick"))  # a tick takes no argument, a job its run's id
            task.apply_async(args=[] if beat_task else [0])
        landed = {
            json.loads(message)["headers"]["task"]: queue for queue in queues for message in broker.lrange(queue, 0, -1)
        }
    finally:
        app.conf.task_always_eager = True
        broker.delete(*queues)
    assert landed == TASK_QUEUES


def test_services_send_jobs_by_name_and_never_import_a_task_module() -> None:
    """A fresh process that loads the services (as a web process does) has no task module loaded;
    sending a job by name loads them then, as the worker does."""
    code = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
import django
django.setup()
import memory_project.urls, memoryapp.compaction.services, memoryapp.extraction.services
import memoryapp.extraction.schedule, memoryapp.search.indexing, memoryapp.threads.hooks
def tasks(): return sorted(m for m in sys.modules if m.startswith("memoryapp.tasks") or m == "governance.tasks")
print(tasks())
from governance.jobs.runs import job_task
print(job_task("memoryapp.tasks.compact_thread").queue, tasks())
"""
    env = {"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.strip().splitlines()
    assert before == "[]"
    assert after.startswith("extraction [") and "'memoryapp.tasks.compaction'" in after


def test_threads_sending_a_fresh_processs_first_jobs_together_all_find_the_task() -> None:
    """A web process's first writes come on several threads at once: each looks up the job's task
    while one of them loads the task modules, and each finds it (7 of 8 found none before)."""
    code = """
import os, sys, threading
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
import django
django.setup()
import memory_project.urls, memoryapp.search.indexing
from governance.jobs.runs import job_task
found, start = [], threading.Barrier(8)
def look():
    start.wait()
    found.append(job_task("memoryapp.tasks.embed_pending") is not None)
threads = [threading.Thread(target=look) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
print(found.count(True))
"""
    env = {"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "8"


@pytest.mark.django_db
def test_migrate_keeps_every_declared_schedule_and_leaves_the_operators_edits() -> None:
    """After migrate every schedule of SCHEDULES exists; an operator's interval, enabled flag and
    name survive the next migrate; a deleted one comes back; a row whose task moved follows it."""
    for schedule in SCHEDULES:
        row = PeriodicTask.objects.get(name=schedule.name)
        assert row.task == schedule.task and row.enabled and row.description
        assert (row.interval.every, row.interval.period) == (schedule.every, schedule.period)
        assert job_task(schedule.task) is not None, schedule.task
    declared = {schedule.task: schedule for schedule in SCHEDULES}
    sweep = PeriodicTask.objects.get(task="governance.tasks.jobs_sweep")
    sweep.interval, _ = IntervalSchedule.objects.get_or_create(every=3, period="minutes")
    sweep.enabled = False
    sweep.save()
    PeriodicTask.objects.filter(task="memoryapp.tasks.items_prune_tick").delete()
    embed = PeriodicTask.objects.get(task="memoryapp.tasks.embed_sweep")
    embed.task = "memoryapp.tasks.an_older_path"  # as if the task had moved in a release
    embed.save()

    call_command("migrate", verbosity=0)

    sweep.refresh_from_db()
    assert (sweep.interval.every, sweep.interval.period, sweep.enabled) == (3, "minutes", False)
    prune = PeriodicTask.objects.get(task="memoryapp.tasks.items_prune_tick")
    assert prune.name == declared[prune.task].name and prune.enabled and prune.interval.every == 10
    embed.refresh_from_db()
    assert embed.task == "memoryapp.tasks.embed_sweep"

    embed.name = "Embedding sweep (ours)"  # an operator's name: the row is found by its task
    embed.save()
    call_command("migrate", verbosity=0)
    assert list(PeriodicTask.objects.filter(task="memoryapp.tasks.embed_sweep").values_list("pk", flat=True)) == [
        embed.pk
    ]
