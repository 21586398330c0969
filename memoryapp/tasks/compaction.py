"""Celery tasks of the compaction area (queue `extraction`: model work, away from governance)."""

from __future__ import annotations

from celery import shared_task

from governance.jobs import job_run


@shared_task(name="memoryapp.tasks.compact_thread", acks_late=True)
def compact_thread(run_id: int) -> None:
    """Compact one thread as its job run says (strategy, options); safe to run twice."""
    from memoryapp.compaction.service import compaction_job

    job_run(run_id, compaction_job)
