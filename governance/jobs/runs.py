"""JobRun bookkeeping: the lock that lets one process run a run, and a run's life: start (claim),
progress, usage, finish, skip, fail; `job_run`, the body of every job (see the package's
docstring: nothing lost, nothing run twice at once)."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Case, F, TextField, Value, When
from django.utils import timezone

from governance import locks
from governance.crypto.fields import update_values_sealed
from governance.models import JobRun

logger = logging.getLogger(__name__)

Status = JobRun.Status
FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.SKIPPED)
# How long a redelivered message waits for the lock of a `running` run: PostgreSQL frees a killed
# worker's lock as soon as it notices the connection closed (at once when it was idle).
CLAIM_WAIT_SECONDS = 10.0
# A run whose worker died this many times is failed, not sent again (a job that kills its worker).
LOST_RUN_MAX_ATTEMPTS = 5
# How the error of a run no worker took begins (the job sweep's note; cleared when a worker takes it).
WAITING_NOTE = "not taken by any worker of queue"

# The thread run (002 busy threads: a write's X-Run-Id) whose request is being served: the jobs it
# asks for carry it in their arguments (`thread_run_id`), and what they cost is traced back to it.
_thread_run: contextvars.ContextVar[str] = contextvars.ContextVar("job_thread_run", default="")


@contextlib.contextmanager
def thread_run_cause(run_id: str | None) -> Iterator[None]:
    """Inside the block, jobs asked for (and model calls made) are caused by the thread run `run_id`."""
    token = _thread_run.set(run_id or "")
    try:
        yield
    finally:
        _thread_run.reset(token)


def thread_run_current(run: JobRun | None = None) -> str:
    """The thread run behind what is done now: the block's (`thread_run_cause`), else the one the
    job run `run` was asked for by ("" for none)."""
    cause = _thread_run.get()
    if not cause and run is not None:
        cause = str((run.arguments or {}).get("thread_run_id") or "")
    return cause


def run_lock_try(run_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", locks.pair(locks.JOB_RUN, run_id))
        row = cursor.fetchone()
    return bool(row and row[0])


def run_lock_release(run_id: int) -> None:
    # A connection that broke frees its locks with it.
    with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", locks.pair(locks.JOB_RUN, run_id))


def job_task(name: str) -> Any | None:
    """The Celery task registered under `name`, or None when no installed app declares one.

    The worker and beat import every app's `tasks` module as they start; another process (a web
    process, a command) sends jobs by name without importing them, so the first look-up of a
    name it has not seen has Celery import them (the same discovery the worker does).
    """
    task = current_app.tasks.get(name)
    if task is None:
        # One discovery at a time: threads that looked up a name together while another imported the
        # tasks modules found none (7 of 8 at a web process's first writes, measured), and each such
        # write left its debounce mark without a run (memoryapp.search.indexing).
        with _discovery:
            task = current_app.tasks.get(name)
            if task is None:
                current_app.autodiscover_tasks(force=True)
                task = current_app.tasks.get(name)
    return task


_discovery = threading.Lock()


def _run_lock_take(run_id: int, *, wait: bool) -> bool:
    """Take the run's lock, waiting for it a little with `wait`: a `running` run's lock may still
    be its killed worker's for a moment (until PostgreSQL notices the connection closed)."""
    deadline = time.monotonic() + (CLAIM_WAIT_SECONDS if wait else 0)
    while not run_lock_try(run_id):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def job_start(run_id: int, *, message_id: str = "") -> JobRun | None:
    """Claim a run for this process: mark it running, holding its lock until `job_run` ends.

    None when there is nothing to run: the run ended (a redelivered message of a finished job),
    or a live process holds it (a second message of a run in good hands). A `running` run whose
    lock is free lost its worker: it is claimed again, up to LOST_RUN_MAX_ATTEMPTS attempts.
    Only the message that claimed a `running` run (`message_id`, brought back by the worker's
    loss) waits for its lock; another copy of it (a resend) is dropped at once, holding no pool
    process while the run runs.
    """
    seen = JobRun.objects.filter(pk=run_id).values("status", "message_id").first()
    if seen is None or seen["status"] in FINISHED:
        return None
    wait = seen["status"] == Status.RUNNING and (not message_id or seen["message_id"] in ("", message_id))
    if not _run_lock_take(run_id, wait=wait):
        logger.info("job run %s is held by a live process; this message is dropped", run_id)
        return None
    try:
        current = JobRun.objects.filter(pk=run_id).values("status", "attempts").first()
        if current is None or current["status"] in FINISHED:
            run_lock_release(run_id)
            return None
        if current["status"] == Status.RUNNING and current["attempts"] >= LOST_RUN_MAX_ATTEMPTS:
            job_fail(JobRun.objects.get(pk=run_id), f"its worker died during {current['attempts']} attempts")
            run_lock_release(run_id)
            return None
        JobRun.objects.filter(pk=run_id).update(
            status=Status.RUNNING,
            started_at=timezone.now(),
            attempts=F("attempts") + 1,
            finished_at=None,
            message_id=message_id,
            next_check_at=None,
            error=Case(
                When(error__startswith=WAITING_NOTE, then=Value("")), default=F("error"), output_field=TextField()
            ),
        )
        return JobRun.objects.get(pk=run_id)
    except BaseException:
        run_lock_release(run_id)
        raise


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
    # The result sealed under the run's owner's key (an update does not call pre_save).
    JobRun.objects.filter(pk=run.pk).update(**update_values_sealed(run, fields))
    for name, value in fields.items():
        setattr(run, name, value)
    return run


# What follows a run's result once it is written, in the same transaction: memoryapp's subject index
# records a result naming a registered person (memoryapp.apps wires it; this leaf imports none of it).
_finished_followers: list[Callable[[JobRun], None]] = []


def job_finished_follow(follower: Callable[[JobRun], None]) -> None:
    """Call `follower(run)` after each run's result is written (`job_finish`), in its transaction."""
    _finished_followers.append(follower)


def job_finish(run: JobRun, result: dict[str, Any] | None = None) -> JobRun:
    with transaction.atomic():
        ended = _end(run, Status.SUCCEEDED, result=result or {})
        for follower in _finished_followers:
            follower(ended)
    return ended


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
    retry_within: float = 0,
    message_id: str = "",
) -> JobRun | None:
    """Run `work(run)` as the body of a job: start, then finish with its result or fail with its error.

    The body of every `@job` task; also what a service calls to run a job in the asking process
    (`compaction_now`, `extraction_now`). The error is re-raised so Celery's retry policy sees it.
    An error of a `transient` type on an attempt that Celery will retry (within `retry_within`
    seconds, its longest backoff) puts the run back to queued (with the error noted), so the retry
    can claim it again. `message_id` is the broker message that asked (`job_start`).
    """
    run = job_start(run_id, message_id=message_id)
    if run is None:
        return None
    try:
        try:
            result = work(run)
        except Exception as exc:
            if isinstance(exc, transient) and not final_attempt:
                # Celery sends the retry now: it counts as handed over, due after its backoff.
                now = timezone.now()
                eta = now + timedelta(seconds=retry_within)
                JobRun.objects.filter(pk=run.pk).update(
                    status=Status.QUEUED,
                    error=f"retrying after: {exc}"[:4000],
                    sent_at=now,
                    eta=eta,
                    resends=0,
                    next_check_at=eta + timedelta(seconds=settings.JOB_RESEND_AFTER_SECONDS),
                )
            else:
                job_fail(run, exc)
            raise
        if run.status == Status.SKIPPED:
            return run
        return job_finish(run, result)
    finally:
        run_lock_release(run.pk)
