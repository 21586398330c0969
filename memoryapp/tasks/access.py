"""Celery tasks of the access log: its retention.

Celery beat runs `access_log_prune_tick` once a day (governance.jobs.schedules.SCHEDULES); it enqueues one
JobRun-recorded `access_log_prune_job`, deduplicated while one is queued, which deletes the rows
older than ACCESS_LOG_RETENTION_DAYS (0: kept until their thread or person goes). Running it twice
deletes nothing twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from governance.jobs.broker import job_enqueue
from governance.jobs.declare import job, tick
from governance.models import JobRun
from memoryapp.search.access_log import access_log_prune

PRUNE_JOB_KIND = "access_log_prune"


@job(name="memoryapp.tasks.access_log_prune_job", queue="governance")
def access_log_prune_job(run: JobRun) -> dict[str, Any]:
    days = settings.ACCESS_LOG_RETENTION_DAYS
    if days <= 0:
        return {"access_rows_deleted": 0, "retention_days": 0}
    deleted = access_log_prune(older_than=timezone.now() - timedelta(days=days))
    return {"access_rows_deleted": deleted, "retention_days": days}


@tick(name="memoryapp.tasks.access_log_prune_tick", queue="governance")
def access_log_prune_tick() -> None:
    job_enqueue(
        kind=PRUNE_JOB_KIND,
        task_name="memoryapp.tasks.access_log_prune_job",
        arguments={},
        dedupe_key=PRUNE_JOB_KIND,
    )
