"""Job runs: what every Celery task records about itself (status, progress, result, usage).

A task calls `job_start(...)` with the JobRun id it was enqueued with, reports progress with
`job_progress`, and ends with `job_finish` / `job_fail` / `job_skip`. `job_enqueue` creates the
run and sends the task once the surrounding transaction commits.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from governance.models import JobRun

Status = JobRun.Status


def job_enqueue(
    *,
    kind: str,
    task: Any,
    arguments: dict[str, Any],
    agent_id: int | None = None,
    dedupe_key: str = "",
) -> JobRun:
    """Create a queued run and send `task(job_run_id)` after commit.

    With a dedupe_key, a run of that key still queued is reused instead of adding another.
    """
    with transaction.atomic():
        if dedupe_key:
            waiting = (
                JobRun.objects.select_for_update()
                .filter(dedupe_key=dedupe_key, status=Status.QUEUED)
                .order_by("-created_at")
                .first()
            )
            if waiting is not None:
                return waiting
        run = JobRun.objects.create(kind=kind, agent_id=agent_id, arguments=arguments, dedupe_key=dedupe_key)
        run_id = run.pk
        transaction.on_commit(lambda: task.delay(run_id))
    return run


def job_start(run_id: int) -> JobRun | None:
    """Mark a run running; None when it already ended (a redelivered message of a finished job)."""
    now = timezone.now()
    claimed = JobRun.objects.filter(pk=run_id, status__in=[Status.QUEUED, Status.RUNNING]).update(
        status=Status.RUNNING, started_at=now, attempts=F("attempts") + 1, finished_at=None
    )
    if not claimed:
        return None
    return JobRun.objects.get(pk=run_id)


def job_progress(run: JobRun, *, done: int, total: int | None = None) -> None:
    fields: dict[str, Any] = {"progress_done": done}
    if total is not None:
        fields["progress_total"] = total
    JobRun.objects.filter(pk=run.pk).update(**fields)
    run.progress_done = done
    if total is not None:
        run.progress_total = total


def job_add_usage(run: JobRun | None, *, input_tokens: int, output_tokens: int, latency_ms: float) -> None:
    """Add one model call's usage to the run (read by the admin as what the job cost)."""
    if run is None:
        return
    with transaction.atomic():
        locked = JobRun.objects.select_for_update().only("usage").get(pk=run.pk)
        usage = dict(locked.usage or {})
        usage["calls"] = usage.get("calls", 0) + 1
        usage["input_tokens"] = usage.get("input_tokens", 0) + input_tokens
        usage["output_tokens"] = usage.get("output_tokens", 0) + output_tokens
        usage["latency_ms"] = round(usage.get("latency_ms", 0) + latency_ms, 1)
        usage["cost_usd"] = round(
            usage["input_tokens"] * settings.LLM_PRICE_INPUT_PER_MTOK / 1e6
            + usage["output_tokens"] * settings.LLM_PRICE_OUTPUT_PER_MTOK / 1e6,
            6,
        )
        JobRun.objects.filter(pk=run.pk).update(usage=usage)
        run.usage = usage


def _end(run: JobRun, status: str, **fields: Any) -> JobRun:
    fields.update(status=status, finished_at=timezone.now())
    JobRun.objects.filter(pk=run.pk).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def job_finish(run: JobRun, result: dict[str, Any] | None = None) -> JobRun:
    return _end(run, Status.SUCCEEDED, result=result or {})


def job_skip(run: JobRun, reason: str) -> JobRun:
    return _end(run, Status.SKIPPED, result={"skipped": reason})


def job_fail(run: JobRun, error: BaseException | str) -> JobRun:
    text = error if isinstance(error, str) else "".join(traceback.format_exception_only(type(error), error)).strip()
    return _end(run, Status.FAILED, error=text[:4000])


def job_run(run_id: int, work: Callable[[JobRun], dict[str, Any] | None]) -> JobRun | None:
    """Run `work(run)` as the body of a job: start, then finish with its result or fail with its error.

    Tasks are thin: they pass the service call as `work`. The error is re-raised so Celery's
    retry policy (transient errors only) sees it.
    """
    run = job_start(run_id)
    if run is None:
        return None
    try:
        result = work(run)
    except Exception as exc:
        job_fail(run, exc)
        raise
    if run.status == Status.SKIPPED:
        return run
    return job_finish(run, result)
