"""Governance jobs (queue `governance`, so a slow model never delays them)."""

from __future__ import annotations

import logging
from typing import Any

from governance import jobs
from governance.audit import audit_verify
from governance.erasure import erasure_run
from governance.jobs import job, tick
from governance.models import JobRun

logger = logging.getLogger(__name__)


@job(name="governance.tasks.audit_verify_job", queue="governance")
def audit_verify_job(run: JobRun) -> dict[str, Any]:
    """Verify the chain against its anchors; the run's result names the first broken seq and why."""
    return audit_verify().as_dict()


@job(name="governance.tasks.erasure_job", queue="governance")
def erasure_job(run: JobRun) -> dict[str, Any]:
    """Run an erasure request: holds, probes, person_erase, the leftover scan, the report
    (governance.erasure). Idempotent: a rerun takes what is left, a done request is left alone."""
    return erasure_run(request_id=int(run.arguments["request_id"]), run=run)


@tick(name="governance.tasks.jobs_sweep", queue="governance")
def jobs_sweep() -> None:
    """Beat, every minute: send the runs the broker never got or lost; requeue runs whose worker
    died (governance.jobs.jobs_sweep). Safe to run often and twice at once: a run is claimed once."""
    counts = jobs.jobs_sweep()
    if any(counts.values()):
        logger.info("job sweep: %s", counts)
