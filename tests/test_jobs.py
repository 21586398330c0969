from __future__ import annotations

import pytest
from django.db import transaction

from governance.audit import audit_append
from governance.jobs import job_add_usage, job_enqueue, job_fail, job_progress, job_run, job_skip, job_start
from governance.models import JobRun
from governance.tasks import audit_verify_job


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
        run = job_enqueue(kind="audit_verify", task=audit_verify_job, arguments={})
        run.refresh_from_db()
        assert run.status == "queued"  # not sent before the commit
    run.refresh_from_db()
    assert run.status == "succeeded" and (run.result["records"], run.result["ok"]) == (1, True)

    # A run still queued under the same key is reused (checked inside one transaction, before commit).
    with transaction.atomic():
        first = job_enqueue(kind="k", task=audit_verify_job, arguments={}, dedupe_key="verify")
        second = job_enqueue(kind="k", task=audit_verify_job, arguments={}, dedupe_key="verify")
        assert first.pk == second.pk


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_on_redis_runs_the_job(settings) -> None:
    """The job goes through the real broker (Redis) to a real Celery worker thread."""
    from celery.contrib.testing.worker import start_worker

    from memory_project.celery import app

    app.conf.task_always_eager = False
    try:
        with start_worker(app, perform_ping_check=False, queues=["governance"], pool="solo", shutdown_timeout=10):
            run = job_enqueue(kind="audit_verify", task=audit_verify_job, arguments={})
            import time

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
    from governance.jobs import job_debounce_clear, job_enqueue_debounced
    from memory_project.celery import app

    job_debounce_clear("verify-debounce")
    app.conf.task_always_eager = False  # keep the run pending: nothing consumes queue `governance` here
    try:
        first = job_enqueue_debounced(kind="k", task=audit_verify_job, arguments={}, debounce_key="verify-debounce")
        second = job_enqueue_debounced(kind="k", task=audit_verify_job, arguments={}, debounce_key="verify-debounce")
        assert first is not None and second is None
        assert JobRun.objects.filter(dedupe_key="verify-debounce").count() == 1
        job_debounce_clear("verify-debounce")  # what the job does as it starts
        third = job_enqueue_debounced(kind="k", task=audit_verify_job, arguments={}, debounce_key="verify-debounce")
        assert third is not None
    finally:
        app.conf.task_always_eager = True
        job_debounce_clear("verify-debounce")
        from governance.jobs import broker_redis

        broker_redis().delete("governance")  # the queue's list: leave no message for a later worker


@pytest.mark.django_db(transaction=True)
def test_a_write_succeeds_when_the_broker_is_down(alice, settings) -> None:
    """The entry is committed; a broker that cannot take the embedding job is logged, not a 500."""
    from governance import jobs
    from memory_project.celery import app
    from memoryapp.models import Entry

    alice.client.post("/api/v1/threads", {"id": "t-broker"}, format="json")
    old_url = app.conf.broker_url
    app.conf.task_always_eager = False
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    jobs.broker_redis.cache_clear()
    old_options = app.conf.broker_transport_options
    app.conf.broker_transport_options = {"max_retries": 0}
    try:
        response = alice.client.post(
            "/api/v1/threads/t-broker/entries", {"role": "user", "content": "hello"}, format="json"
        )
    finally:
        app.conf.broker_url = old_url
        app.conf.broker_transport_options = old_options
        app.conf.task_always_eager = True
        jobs.broker_redis.cache_clear()
    assert response.status_code == 201, response.content
    assert Entry.objects.filter(thread__external_id="t-broker").count() == 1


@pytest.mark.django_db
def test_embed_sweep_embeds_entries_whose_job_was_never_sent(alice, django_capture_on_commit_callbacks) -> None:
    from django_celery_beat.models import PeriodicTask

    from memoryapp.models import Entry, Thread
    from memoryapp.tasks.embedding import embed_sweep

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
