"""Celery tasks of the extraction area (queue `extraction`)."""

from __future__ import annotations

from celery import shared_task

from governance.jobs import job_debounce_clear, job_run


@shared_task(name="memoryapp.tasks.extract_thread", acks_late=True)
def extract_thread(run_id: int) -> None:
    """Extract memory items from one thread's new entries; safe to run twice."""
    from governance.models import JobRun
    from memoryapp.extraction.service import extraction_debounce_key, extraction_job

    thread_pk = JobRun.objects.filter(pk=run_id).values_list("arguments__thread_pk", flat=True).first()
    if thread_pk is not None:
        job_debounce_clear(extraction_debounce_key(int(thread_pk)))
    job_run(run_id, extraction_job)
