"""Job runs: what every Celery task records about itself (status, progress, result, usage).

A task calls `job_start(...)` with the JobRun id it was enqueued with, reports progress with
`job_progress`, and ends with `job_finish` / `job_fail` / `job_skip`. `job_enqueue` creates the
run and sends the task once the surrounding transaction commits.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import traceback
from collections.abc import Callable
from typing import Any

import redis
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
    countdown: float | None = None,
) -> JobRun:
    """Create a queued run and send `task(job_run_id)` after commit (after `countdown` seconds).

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
        transaction.on_commit(lambda: task.apply_async(args=[run_id], countdown=countdown))
    return run


@functools.cache
def broker_redis() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)


@functools.cache
def _database_tag() -> str:
    """Which database the marks belong to: services (or test runs) sharing one Redis never mix them."""
    db = settings.DATABASES["default"]
    return hashlib.sha256(f"{db['HOST']}|{db['PORT']}|{db['NAME']}".encode()).hexdigest()[:10]


def debounce_mark(key: str) -> str:
    """The Redis key that marks a run of `key` pending."""
    return f"memory:{_database_tag()}:pending-job:{key}"


def job_enqueue_debounced(
    *,
    kind: str,
    task: Any,
    arguments: dict[str, Any],
    debounce_key: str,
    agent_id: int | None = None,
    countdown: float | None = None,
    pending_ttl: int = 300,
) -> JobRun | None:
    """Send at most one run per key while one is pending, for jobs asked for on every write.

    A Redis `SET NX` marks the key pending (one round trip, no database row on the hot path);
    the job clears the mark when it starts (`job_debounce_clear`), so a write that lands after
    the job read its rows sends the next run. The mark expires after `pending_ttl` seconds in
    case a run is lost before it starts. Returns the new run, or None when one was pending.
    """
    try:
        fresh = bool(broker_redis().set(debounce_mark(debounce_key), "1", nx=True, ex=pending_ttl))
    except redis.RedisError:
        fresh = True  # the broker is unwell: fall back to the JobRun dedupe below
    if not fresh:
        return None
    return job_enqueue(
        kind=kind, task=task, arguments=arguments, agent_id=agent_id, dedupe_key=debounce_key, countdown=countdown
    )


def job_debounce_clear(debounce_key: str) -> None:
    """Called by a debounced job as it starts: later writes send another run."""
    with contextlib.suppress(redis.RedisError):
        broker_redis().delete(debounce_mark(debounce_key))


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


def job_run(
    run_id: int,
    work: Callable[[JobRun], dict[str, Any] | None],
    *,
    transient: tuple[type[BaseException], ...] = (),
    final_attempt: bool = True,
) -> JobRun | None:
    """Run `work(run)` as the body of a job: start, then finish with its result or fail with its error.

    Tasks are thin: they pass the service call as `work`. The error is re-raised so Celery's
    retry policy sees it. An error of a `transient` type on an attempt that Celery will retry
    puts the run back to queued (with the error noted), so the retry can claim it again.
    """
    run = job_start(run_id)
    if run is None:
        return None
    try:
        result = work(run)
    except Exception as exc:
        if isinstance(exc, transient) and not final_attempt:
            JobRun.objects.filter(pk=run.pk).update(status=Status.QUEUED, error=f"retrying after: {exc}"[:4000])
        else:
            job_fail(run, exc)
        raise
    if run.status == Status.SKIPPED:
        return run
    return job_finish(run, result)
