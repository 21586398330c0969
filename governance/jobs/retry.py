"""Staff send a failed job run again (the job-run admin's "retry").

A run is retried in place, not copied: its id stays the one the pages, the audit trail and the
job's own records name. The jobs are idempotent (`governance.jobs`), so running one again writes
nothing twice.

1. Lock the run; only a failed run of a task is retried (a run done inside a request has no task
   to send: it is asked for again where it was asked for).
2. Put it back to queued as a new run would be: no start, no end, no progress, no result, attempts
   from zero (the lost-worker limit counts this series only), the old error kept after a note.
3. Send its task after commit (`job_send`: a broker that is away leaves it queued and unsent, and
   the job sweep sends it); audit `job.retry` with the run's id and kind, in the same transaction.
"""

from __future__ import annotations

from django.db import transaction

from governance.audit.chain import audit_append
from governance.jobs.broker import job_send
from governance.jobs.runs import job_task
from governance.models import JobRun


class RetryRefused(Exception):
    """The run cannot be sent again (its message says why)."""


def job_retry_refusal(*, run: JobRun) -> str:
    """Why `job_retry` would refuse the run as it stands ("" when it would send it again): what the
    run's page asks before it offers "Retry this run"."""
    if run.status != JobRun.Status.FAILED:
        return f"Job run #{run.pk} is {run.status}: only a failed run is retried."
    task = job_task(run.task_name) if run.task_name else None
    if task is None:
        return f"Job run #{run.pk} ran inside a request (no task to send): ask for it again where it was asked for."
    return ""


@transaction.atomic
def job_retry(*, run: JobRun, actor: str) -> JobRun:
    locked = JobRun.objects.select_for_update().filter(pk=run.pk).first()
    if locked is None:
        raise RetryRefused(f"Job run #{run.pk} no longer exists.")
    if refusal := job_retry_refusal(run=locked):
        raise RetryRefused(refusal)
    attempts = locked.attempts
    previous_error = locked.error
    JobRun.objects.filter(pk=locked.pk).update(
        status=JobRun.Status.QUEUED,
        started_at=None,
        finished_at=None,
        sent_at=None,
        attempts=0,
        progress_done=0,
        progress_total=None,
        result={},
        error=f"retried by staff after: {previous_error}"[:4000] if previous_error else "",
    )
    audit_append(
        action="job.retry",
        actor=actor,
        agent_id=locked.agent_id,
        subject=str(locked.pk),
        outcome="queued",
        details={"kind": locked.kind, "attempts_before": attempts},
    )
    run_id = locked.pk
    task_name = locked.task_name
    transaction.on_commit(lambda: job_send(run_id=run_id, task_name=task_name))
    locked.refresh_from_db()
    return locked
