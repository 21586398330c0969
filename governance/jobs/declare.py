"""Declaring jobs: `@job` (a Celery task whose body is `job_run`, with its retries and time
limits) and `@tick` (a beat task that finds work and enqueues jobs)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from billiard.exceptions import TimeLimitExceeded
from celery import Task, shared_task
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from governance.jobs.broker import job_debounce_clear
from governance.jobs.runs import job_run
from governance.models import JobRun

logger = logging.getLogger(__name__)

Status = JobRun.Status

Work = Callable[[JobRun], "dict[str, Any] | None"]


def job_time_limit_exceeded(*, run_id: int, message_id: str, limit: float) -> bool:
    """Fail the run whose pool process the job's hard time limit kills; True when it was its run.

    Called in the worker's main process as it kills the pool process (which still holds the
    run's lock, so the run is not taken, only failed where `message_id` claimed it and it still
    runs). Without this, the run would stay `running`, be requeued by the job sweep and time out
    again, LOST_RUN_MAX_ATTEMPTS times.
    """
    close_old_connections()  # the main process's connection may have been idle for long
    failed = JobRun.objects.filter(pk=run_id, status=Status.RUNNING, message_id=message_id).update(
        status=Status.FAILED,
        finished_at=timezone.now(),
        error=f"time limit of {limit:g} s exceeded: the worker stopped the job (not retried: it would time out again)",
    )
    return bool(failed)


class JobTask(Task):  # type: ignore[misc]  # celery's Task is untyped
    """The Celery task class of every `@job`: its hard time limit fails its run at once."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        # Celery calls this in the worker's main process for a hard time limit (TimeLimitExceeded);
        # every other failure was recorded by `job_run` in the pool process already.
        if not isinstance(exc, TimeLimitExceeded) or not args:
            return
        limit = exc.args[0] if exc.args and isinstance(exc.args[0], (int, float)) else self.time_limit
        try:
            job_time_limit_exceeded(run_id=int(args[0]), message_id=str(task_id), limit=float(limit or 0))
        except DatabaseError:
            logger.exception("job run %s exceeded its time limit and could not be failed; the sweep will", args[0])


def job(
    *,
    name: str,
    queue: str,
    transient: tuple[type[BaseException], ...] = (),
    retries: int = 0,
    backoff: int = 5,
    backoff_max: int = 120,
    time_limit: int | None = None,
    soft_time_limit: int | None = None,
    debounce: Callable[[JobRun], str] | None = None,
) -> Callable[[Work], Any]:
    """Declare a job: `work(run)` becomes the Celery task `name`, whose one argument is a JobRun id.

    - name: the task name the run records and the broker's messages carry; never renamed, or
      messages already queued would find no task.
    - queue: where its messages go (one queue per kind of work: a slow model never delays an erasure).
    - transient, retries, backoff, backoff_max: an error of a `transient` type is retried up to
      `retries` times, after an exponential backoff from `backoff` up to `backoff_max` seconds;
      the run goes back to queued in between, so the retry claims it. Any other error, and the
      last attempt's, fails the run.
    - time_limit, soft_time_limit: seconds (default CELERY_TASK_TIME_LIMIT, five seconds less; a
      time_limit alone gets a soft one five seconds less). Past the soft limit the job gets
      SoftTimeLimitExceeded and fails its run; past the hard one the worker kills its process and
      the run fails at once (`JobTask`).
    - debounce: the run's debounce key (`job_enqueue_debounced`), cleared as the run starts: a
      write after that point sends the next run.

    The task acks late and rejects on worker loss: the message of a worker that died mid-run comes
    back and claims the run again (`job_start`). `work` ends the run with what it returns
    (`job_finish`), or skips it (`job_skip`, then returns None). Called directly (a command that
    waits for the job, a test), the task runs the job in this process, as its last attempt.
    """
    if bool(transient) != (retries > 0):
        raise ValueError(f"job {name}: transient errors are retried, and only they: give both or neither")

    def declare(work: Work) -> Any:
        def body(run: JobRun) -> dict[str, Any] | None:
            if debounce is not None and (key := debounce(run)):
                job_debounce_clear(key)
            return work(run)

        def run_task(task: Any, run_id: int) -> None:
            # Celery retries only what came through the broker (or `apply`), not a direct call.
            final_attempt = bool(task.request.called_directly) or task.request.retries >= retries
            job_run(
                run_id,
                body,
                transient=transient,
                final_attempt=final_attempt,
                retry_within=backoff_max,
                message_id=str(task.request.id or ""),
            )

        run_task.__name__, run_task.__qualname__ = work.__name__, work.__qualname__
        run_task.__module__, run_task.__doc__ = work.__module__, work.__doc__
        options: dict[str, Any] = {
            "name": name,
            "base": JobTask,
            "queue": queue,
            "bind": True,
            "acks_late": True,
            "reject_on_worker_lost": True,
            "max_retries": retries,
        }
        if transient:
            options.update(autoretry_for=transient, retry_backoff=backoff, retry_backoff_max=backoff_max)
        soft = soft_time_limit
        if time_limit is not None:
            options["time_limit"] = time_limit
            if soft is None:
                # Not the app's soft limit (CELERY_TASK_TIME_LIMIT's), which may be the longer:
                # Celery refuses to send a task whose soft limit passes its hard one.
                soft = time_limit - 5 if time_limit > 10 else time_limit
        if soft is not None:
            options["soft_time_limit"] = soft
        return shared_task(**options)(run_task)

    return declare


def tick(*, name: str, queue: str) -> Callable[[Callable[[], None]], Any]:
    """Declare a beat task (scheduled in SCHEDULES): it has no run of its own, it finds work and
    enqueues jobs, and is safe to run twice at once."""
    return shared_task(name=name, queue=queue, ignore_result=True)
