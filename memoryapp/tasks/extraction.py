"""Celery tasks of the extraction area (queue `extraction`)."""

from __future__ import annotations

from celery import shared_task

from governance.jobs import job_run


@shared_task(name="memoryapp.tasks.extract_thread", acks_late=True)
def extract_thread(run_id: int) -> None:
    """Extract memory items from one thread's new entries; safe to run twice."""
    from memoryapp.extraction.service import extraction_job

    job_run(run_id, extraction_job)
