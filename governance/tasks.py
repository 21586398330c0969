"""Governance jobs (queue `governance`, so a slow model never delays them)."""

from __future__ import annotations

import logging
from typing import Any

from governance.audit.chain import AUDIT_VERIFY_KIND, audit_verify
from governance.crypto.envelope import OWNER_CACHE_SECONDS
from governance.crypto.rotation import encryption_rotate
from governance.erasure.resume import erasure_resume, erasures_resume
from governance.erasure.services import erasure_requests_lost, erasure_requests_retry_due, erasure_run
from governance.export.services import export_run
from governance.jobs import runs, sweep
from governance.jobs.broker import job_enqueue
from governance.jobs.declare import job, tick
from governance.models import JobRun
from governance.retention import services as retention

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


@job(name="governance.tasks.erasure_resume_job", queue="governance")
def erasure_resume_job(run: JobRun) -> dict[str, Any]:
    """Finish an erasure interrupted with no request behind it (governance.erasure.resume): the
    run names the person's mark (`ErasureMark`), never the person; a run sent before the marks
    were rows of their own (migration memoryapp 0062) names none and is skipped."""
    mark = run.arguments.get("mark")
    return erasure_resume(mark_id=int(mark) if mark is not None else None, run=run)


@tick(name="governance.tasks.erasures_resume_tick", queue="governance")
def erasures_resume_tick() -> None:
    """Beat, every 5 minutes: a resume job for each person left marked as being erased by an
    erasure no process runs and no request stands behind (governance.erasure.resume), and the
    automatic retries due of failed erasure requests (`erasure_requests_retry_due`: an error that
    passes by itself, bounded, with backoff), a request whose job run stopped without it (its
    worker killed: `erasure_requests_lost`) first failed as such an error."""
    counts = erasures_resume()
    if counts["resumed"]:
        logger.info("erasures resumed: %s", counts)
    lost = erasure_requests_lost()
    if lost:
        logger.warning("erasure requests whose job run stopped, failed to be run again: %s", lost)
    retried = erasure_requests_retry_due()
    if retried:
        logger.info("erasure requests run again automatically: %s", retried)


# Hours: a person with many threads is written at tens of MB/s (bench/export.py), never held in memory.
@job(name="governance.tasks.export_person", queue="governance", time_limit=4 * 3600)
def export_person(run: JobRun) -> dict[str, Any] | None:
    """Write the archive of an export request (governance.export): everything about one person."""
    return export_run(request_id=int(run.arguments["request_id"]), run=run)


@tick(name="governance.tasks.jobs_sweep", queue="governance")
def jobs_sweep() -> None:
    """Beat, every minute: send the runs the broker never got or lost; requeue runs whose worker
    died (governance.jobs.sweep.jobs_sweep). Safe to run often and twice at once: a run is claimed once."""
    counts = sweep.jobs_sweep()
    if any(counts.values()):
        logger.info("job sweep: %s", counts)


@tick(name="governance.tasks.audit_verify_tick", queue="governance")
def audit_verify_tick() -> None:
    """Beat, daily: one verification run (deduplicated while one waits); a broken chain shows in its
    result, on the admin index and in /readyz."""
    job_enqueue(kind=AUDIT_VERIFY_KIND, task_name=audit_verify_job.name, arguments={}, dedupe_key=AUDIT_VERIFY_KIND)


@job(name=retention.PRUNE_TASK, queue="governance", time_limit=6 * 3600)
def retention_prune_job(run: JobRun) -> dict[str, Any]:
    """Apply every retention policy (governance.retention); goes on from its saved position when
    claimed again after its worker died."""
    return retention.retention_prune_job(run)


@tick(name="governance.tasks.retention_prune_tick", queue="governance")
def retention_prune_tick() -> None:
    """Beat, daily by default (editable in the admin): one prune of every agent."""
    retention.retention_prune_request(actor="schedule")


@job(name="governance.tasks.encryption_rotate_job", queue="governance", time_limit=24 * 3600)
def encryption_rotate_job(run: JobRun) -> dict[str, Any]:
    """Rotate to the first master key and seal every row under its owner's key
    (governance.crypto.rotation); progress counts the rows checked."""
    return encryption_rotate(
        batch=int(run.arguments.get("batch") or 500),
        rekey=bool(run.arguments.get("rekey")),
        settle=float(run.arguments.get("settle", OWNER_CACHE_SECONDS + 1)),
        progress=lambda done, total: runs.job_progress(run, done=done, total=total),
    )
