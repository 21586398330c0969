"""Governance jobs (queue `governance`, so a slow model never delays them)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from governance.audit import audit_verify
from governance.jobs import job_run
from governance.models import JobRun


@shared_task(name="governance.tasks.audit_verify_job", acks_late=True)
def audit_verify_job(run_id: int) -> None:
    """Verify the chain against its anchors; the run's result names the first broken seq and why."""

    def work(run: JobRun) -> dict[str, Any]:
        return audit_verify().as_dict()

    job_run(run_id, work)
