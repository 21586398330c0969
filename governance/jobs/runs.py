"""Job runs, the one job decorator, and the beat schedules.

A job is declared once, with `@job(name=..., queue=..., transient=..., retries=..., ...)` on a
function `work(run) -> result`: the decorator registers the Celery task and does the JobRun
bookkeeping (claim, finish, skip, fail, back to queued before a retry), so no task can forget it.
Services ask for a job with `job_enqueue(kind=..., task_name=...)`: by name, after commit, so a
service never imports a task module (tasks import services, never the other way). Beat tasks are
declared with `@tick(...)` and scheduled in SCHEDULES, kept in the database on every migrate.

Nothing is lost, nothing runs twice at once:

1. A run is handed to the broker after commit; `sent_at` records that the broker took it. A send
   that fails (Redis away) is logged, never raised: the write stands and the run stays queued.
   After a failed send the process stops asking the broker for BROKER_BREAKER_SECONDS (a breaker),
   so a broker that hangs costs one request its timeout, not every write of the outage.
2. A never-sent queued run is sent again by the next `job_enqueue` of its dedupe key, and by the
   job sweep (`jobs_sweep`, beat every minute). A sent run not started JOB_RESEND_AFTER_SECONDS
   after its countdown is sent again when the broker lost its data since (a Redis restart without
   persistence), and otherwise at most JOB_RESEND_MAX times, only while its queue is empty (with
   messages waiting, a copy would only wait behind them), looked at after doubling waits; a run
   waiting that long says so in its error ("not taken by any worker of queue ... since ...").
3. The process running a run holds a PostgreSQL session advisory lock on it. When the process
   dies (kill -9, out of memory, a lost host), PostgreSQL frees the lock as the connection drops:
   a free lock on a `running` run means its worker is gone. The message of a pool child killed
   mid-task comes back at once (acks_late + reject_on_worker_lost) and claims the run; a run
   whose whole worker died is put back to queued and sent by the sweep. A pool child killed by
   the job's hard time limit fails its run at once (it would only time out again).
4. However often a run is sent, `job_start` claims it only with its lock: one process runs it
   at a time, and a finished run is never started again.
5. An error the job declares transient, on an attempt Celery will retry, puts the run back to
   queued before the retry is sent, so the retry claims it; any other error, or the last
   attempt's, fails the run.

The lock is a session-level advisory lock: every process that runs jobs (workers, and web
processes running a job in a request) needs a database session of its own for as long as the job
runs. A pooler in transaction mode (PgBouncer `pool_mode = transaction`) hands the session to other
clients between transactions and breaks it; use session pooling, or a direct connection, for them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis
from billiard.exceptions import TimeLimitExceeded
from celery import Task, current_app, shared_task
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import Case, Count, F, Min, Q, TextField, Value, When
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from kombu.exceptions import OperationalError

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


def _run_lock_try(run_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", locks.pair(locks.JOB_RUN, run_id))
        row = cursor.fetchone()
    return bool(row and row[0])


def _run_lock_release(run_id: int) -> None:
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
        current_app.autodiscover_tasks(force=True)
        task = current_app.tasks.get(name)
    return task


# --- the broker breaker ---------------------------------------------------------------------
# Per process: until this time.monotonic(), requests do not ask the broker (it failed just now).
_broker_down_until = 0.0


def broker_resting() -> bool:
    """True for BROKER_BREAKER_SECONDS after a send or a debounce mark of this process failed.

    A broker that accepts connections and never answers costs each send BROKER_TIMEOUT seconds
    (and a write two or three of them): while the breaker is open, writes skip the broker and
    answer at once, their runs left queued and unsent for the job sweep, which always tries.
    """
    return time.monotonic() < _broker_down_until


def _broker_failed() -> None:
    global _broker_down_until
    _broker_down_until = time.monotonic() + settings.BROKER_BREAKER_SECONDS


def _broker_answered() -> None:
    global _broker_down_until
    _broker_down_until = 0.0


def broker_breaker_reset() -> None:
    """Ask the broker again from the next send on (tests: each starts with the breaker closed)."""
    _broker_answered()


def job_send(
    *, run_id: int, task_name: str, countdown: float | None = None, force: bool = False, resend: bool = False
) -> bool:
    """Hand a run to the broker; True when it took it (then `sent_at` says when).

    A broker that is away is logged, never raised: this runs after the write committed, and the
    run stays queued without `sent_at`, so the next enqueue of its key or the job sweep sends it.
    While the breaker is open (`broker_resting`) it is not even asked, unless `force` (the sweep).
    The task's own options (its queue) route the message. A `countdown` sets the run's `eta`,
    before which the sweep never sends it again. A `resend` (the sweep's, of a message the broker
    still holds) counts in `resends` and leaves `sent_at`, the start of the wait, as it is.
    """
    task = job_task(task_name)
    if task is None:
        logger.error("job run %s names task %s, which this process does not know", run_id, task_name)
        return False
    if not force and broker_resting():
        logger.info("the broker failed just now: job run %s (%s) stays queued for the job sweep", run_id, task_name)
        return False
    try:
        task.apply_async(args=[run_id], countdown=countdown)
    except Exception as exc:
        if isinstance(exc, (OperationalError, redis.RedisError, OSError)):
            _broker_failed()  # the broker, not this message: rest from it
        logger.warning("the broker did not take job run %s (%s); it stays queued", run_id, task_name, exc_info=True)
        return False
    _broker_answered()
    now = timezone.now()
    fields: dict[str, Any] = {}
    if resend:
        fields["resends"] = F("resends") + 1
    else:
        fields.update(sent_at=now, resends=0)
    if countdown:
        fields["eta"] = now + timedelta(seconds=countdown)
    not_before = fields.get("eta") or now
    fields["next_check_at"] = not_before + timedelta(seconds=settings.JOB_RESEND_AFTER_SECONDS)
    JobRun.objects.filter(pk=run_id).update(**fields)
    return True


def job_enqueue(
    *,
    kind: str,
    task_name: str,
    arguments: dict[str, Any],
    agent_id: int | None = None,
    dedupe_key: str = "",
    countdown: float | None = None,
) -> JobRun:
    """Create a queued run and send the task `task_name` (a `@job`) its id after commit (after
    `countdown` seconds).

    With a dedupe_key, a run of that key still queued is reused instead of adding another; if the
    broker never took it (it was away), it is sent again now. A name no app declares is a
    programming error, raised here, before anything is written.
    """
    if job_task(task_name) is None:
        raise LookupError(f"no job task is named {task_name!r}")
    with transaction.atomic():
        if dedupe_key:
            waiting = (
                JobRun.objects.select_for_update()
                .filter(dedupe_key=dedupe_key, status=Status.QUEUED)
                .order_by("-created_at")
                .first()
            )
            if waiting is not None:
                if waiting.sent_at is None:
                    waiting_id = waiting.pk
                    transaction.on_commit(lambda: job_send(run_id=waiting_id, task_name=task_name, countdown=countdown))
                return waiting
        # Not before the countdown, even when the broker is away and the sweep sends it.
        eta = timezone.now() + timedelta(seconds=countdown) if countdown else None
        run = JobRun.objects.create(
            kind=kind, agent_id=agent_id, arguments=arguments, dedupe_key=dedupe_key, task_name=task_name, eta=eta
        )
        run_id = run.pk
        transaction.on_commit(lambda: job_send(run_id=run_id, task_name=task_name, countdown=countdown))
    return run


@functools.cache
def broker_redis() -> redis.Redis:
    timeout = settings.BROKER_TIMEOUT
    return redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=timeout, socket_connect_timeout=timeout)


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
    task_name: str,
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
    if not debounce_mark_set(debounce_mark(debounce_key), ttl=pending_ttl):
        return None
    return job_enqueue(
        kind=kind,
        task_name=task_name,
        arguments=arguments,
        agent_id=agent_id,
        dedupe_key=debounce_key,
        countdown=countdown,
    )


def debounce_mark_set(key: str, *, ttl: int) -> bool:
    """Mark `key` (a `debounce_mark`) pending for `ttl` seconds; False when it was pending already.

    True when the broker is unwell (or resting after a failure): the caller then goes on to the
    JobRun dedupe of `job_enqueue`, which needs no broker.
    """
    if broker_resting():
        return True
    try:
        fresh = bool(broker_redis().set(key, "1", nx=True, ex=ttl))
    except redis.RedisError:
        _broker_failed()
        return True
    _broker_answered()
    return fresh


def job_debounce_clear(debounce_key: str) -> None:
    """Called by a debounced job as it starts: later writes send another run."""
    with contextlib.suppress(redis.RedisError):
        broker_redis().delete(debounce_mark(debounce_key))


def _run_lock_take(run_id: int, *, wait: bool) -> bool:
    """Take the run's lock, waiting for it a little with `wait`: a `running` run's lock may still
    be its killed worker's for a moment (until PostgreSQL notices the connection closed)."""
    deadline = time.monotonic() + (CLAIM_WAIT_SECONDS if wait else 0)
    while not _run_lock_try(run_id):
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
            _run_lock_release(run_id)
            return None
        if current["status"] == Status.RUNNING and current["attempts"] >= LOST_RUN_MAX_ATTEMPTS:
            job_fail(JobRun.objects.get(pk=run_id), f"its worker died during {current['attempts']} attempts")
            _run_lock_release(run_id)
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
        _run_lock_release(run_id)
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
        _run_lock_release(run.pk)


# --- declaring jobs -----------------------------------------------------------------------------

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


# Runs looked at per sweep: a backlog is worked through one minute after another.
SWEEP_BATCH = 500


def _requeue_lost(run_id: int) -> str:
    """With the run's lock held: what to do with a `running` run whose process is gone."""
    run = JobRun.objects.filter(pk=run_id, status=Status.RUNNING).first()
    if run is None:
        return "gone"
    if not run.task_name:
        job_fail(run, "the process running it stopped before it ended")
        return "failed"
    if run.attempts >= LOST_RUN_MAX_ATTEMPTS:
        job_fail(run, f"its worker died during {run.attempts} attempts")
        return "failed"
    JobRun.objects.filter(pk=run_id, status=Status.RUNNING).update(
        status=Status.QUEUED, sent_at=None, error="requeued: the worker running it stopped"
    )
    return "requeued"


def broker_epoch_mark() -> str:
    """The Redis key holding `broker_epoch` (in the broker's own database, beside its queues)."""
    return f"memory:{_database_tag()}:broker-epoch"


def broker_epoch() -> datetime | None:
    """Since when the broker has kept its data; None when it does not answer.

    A key written the first time the sweep finds it missing lives and dies with the broker's data:
    a Redis restarted without persistence (or flushed) loses it with every message it held, and
    the next sweep writes it again with that sweep's time. A message taken before that time is
    gone; one taken after is still in the broker (waiting in its queue, or reserved by a worker)
    unless a worker consumed it. A message sent between the loss and that sweep counts as lost:
    it is sent once more, which is harmless.
    """
    key = broker_epoch_mark()
    try:
        pipe = broker_redis().pipeline(transaction=False)
        pipe.set(key, timezone.now().isoformat(), nx=True)
        pipe.get(key)
        _, value = pipe.execute()
    except redis.RedisError:
        return None
    try:
        return datetime.fromisoformat(value.decode())
    except (AttributeError, ValueError):
        with contextlib.suppress(redis.RedisError):
            broker_redis().delete(key)  # not ours to read: the next sweep starts it again
        return None


def _queue_of(task_name: str) -> str:
    task = job_task(task_name)
    return str(getattr(task, "queue", None) or settings.CELERY_TASK_DEFAULT_QUEUE)


def _look_at_waiting_run(run: JobRun, *, epoch: datetime, queue_length: Callable[[str], int]) -> str:
    """The sweep's look at a queued run the broker took and no worker started: "sent", "resent",
    "noted" or "broker_away" (see `jobs_sweep`, step 3)."""
    assert run.sent_at is not None
    if run.sent_at < epoch:
        # The broker lost its data since: a new hand-over, as if it had never been sent.
        return "sent" if job_send(run_id=run.pk, task_name=run.task_name, force=True) else "broker_away"
    now = timezone.now()
    queue = _queue_of(run.task_name)
    since = max(run.sent_at, run.eta or run.sent_at)
    waiting = queue_length(queue)
    note = f"{WAITING_NOTE} {queue} since {since:%Y-%m-%d %H:%M:%S} UTC"
    outcome = "noted"
    if waiting:
        # Its message is, in all likelihood, one of those: a copy would only wait behind it.
        note += f": {waiting} message(s) wait in that queue; is a worker consuming it (CELERY_QUEUES)?"
    elif run.resends < settings.JOB_RESEND_MAX:
        if not job_send(run_id=run.pk, task_name=run.task_name, force=True, resend=True):
            return "broker_away"
        outcome = "resent"
        note += f"; its queue was empty: sent again ({run.resends + 1} of at most {settings.JOB_RESEND_MAX})"
    else:
        note += f"; sent again {run.resends} time(s), the most (JOB_RESEND_MAX): left queued"
    # Looked at again after doubling waits: a run no worker takes costs a look now and then.
    wait = max(settings.JOB_RESEND_AFTER_SECONDS, (now - since).total_seconds())
    JobRun.objects.filter(pk=run.pk, status=Status.QUEUED).update(
        error=note, next_check_at=now + timedelta(seconds=wait)
    )
    return outcome


def jobs_sweep() -> dict[str, int]:
    """Hand the broker what it never got or lost, and requeue runs whose worker died (beat, every minute).

    1. A `running` run whose lock is free lost its process (`job_start`): a run of a task goes back
       to queued, unsent; a run done in a request process, or whose worker died
       LOST_RUN_MAX_ATTEMPTS times, is failed with the reason.
    2. Queued runs of a task the broker never took are sent once their countdown (`eta`) passed:
       those JOB_UNSENT_GRACE_SECONDS old (their send failed, or the process died between commit
       and send) and those put back in step 1.
    3. Queued runs the broker took, past their countdown, that no worker started:
       - taken before the broker lost its data (`broker_epoch`): sent again at once;
       - otherwise looked at JOB_RESEND_AFTER_SECONDS after their countdown, then after waits
         that double: sent again while their queue is empty (the message may have been dropped)
         up to JOB_RESEND_MAX times; with messages waiting in the queue (a backlog, or a queue no
         worker consumes) not sent, as a copy would wait behind them. Each look writes in the
         run's error that it is "not taken by any worker of queue Q since T", and why.
    Sending a run twice is harmless: it is claimed once. The sweep sends even while this process's
    breaker rests (it runs in a worker, where waiting on the broker holds no request).
    """
    counts = {"requeued": 0, "failed": 0, "sent": 0, "resent": 0, "noted": 0, "not_sent": 0}
    requeued: list[int] = []
    running = JobRun.objects.filter(status=Status.RUNNING).order_by("created_at").values_list("pk", flat=True)
    for run_id in list(running[:SWEEP_BATCH]):
        if not _run_lock_try(run_id):
            continue  # its process is alive
        try:
            outcome = _requeue_lost(run_id)
        finally:
            _run_lock_release(run_id)
        if outcome == "requeued":
            requeued.append(run_id)
            counts["requeued"] += 1
        elif outcome == "failed":
            counts["failed"] += 1
    if requeued:
        logger.warning("job runs %s lost their worker; sent again", requeued)

    now = timezone.now()
    unsent = now - timedelta(seconds=settings.JOB_UNSENT_GRACE_SECONDS)
    queued = (
        JobRun.objects.filter(status=Status.QUEUED).exclude(task_name="").filter(Q(eta__isnull=True) | Q(eta__lte=now))
    )
    never_sent = (
        queued.filter(sent_at__isnull=True)
        .filter(Q(created_at__lte=unsent) | Q(pk__in=requeued))
        .order_by("created_at")
        .values_list("pk", "task_name")
    )
    for run_id, task_name in list(never_sent[:SWEEP_BATCH]):
        if job_task(task_name) is None:
            logger.error("job run %s names task %s, which this worker does not know", run_id, task_name)
            counts["not_sent"] += 1
        elif job_send(run_id=run_id, task_name=task_name, force=True):
            counts["sent"] += 1
        else:
            counts["not_sent"] += 1
            return counts  # the broker is away: the next sweep tries again

    epoch = broker_epoch()
    if epoch is None:
        return counts
    lengths: dict[str, int] = {}

    def queue_length(queue: str) -> int:
        if queue not in lengths:
            lengths[queue] = int(broker_redis().llen(queue))  # kombu's Redis transport: a list per queue
        return lengths[queue]

    taken = (
        queued.filter(sent_at__isnull=False)
        .filter(Q(sent_at__lt=epoch) | Q(next_check_at__lte=now))
        .order_by("created_at")
        .only("pk", "task_name", "sent_at", "eta", "resends")
    )
    for run in list(taken[:SWEEP_BATCH]):
        if job_task(run.task_name) is None:
            logger.error("job run %s names task %s, which this worker does not know", run.pk, run.task_name)
            counts["not_sent"] += 1
            continue
        try:
            outcome = _look_at_waiting_run(run, epoch=epoch, queue_length=queue_length)
        except redis.RedisError:
            outcome = "broker_away"
        if outcome == "broker_away":
            counts["not_sent"] += 1
            break
        counts[outcome] += 1
    return counts


def jobs_waiting() -> list[dict[str, Any]]:
    """Per task, the queued runs the broker took that no worker started JOB_RESEND_AFTER_SECONDS
    after their countdown: how many, and since when (/readyz shows them; the admin's job runs
    list filters them)."""
    stale = timezone.now() - timedelta(seconds=settings.JOB_RESEND_AFTER_SECONDS)
    rows = (
        JobRun.objects.filter(status=Status.QUEUED, sent_at__lte=stale)
        .exclude(task_name="")
        .filter(Q(eta__isnull=True) | Q(eta__lte=stale))
        .values("task_name")
        .annotate(runs=Count("pk"), since=Min("sent_at"))
        .order_by("task_name")
    )
    return [
        {"queue": _queue_of(row["task_name"]), "task": row["task_name"], "runs": row["runs"], "since": row["since"]}
        for row in rows
    ]


# --- beat schedules ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """A beat schedule: `task` (a `@tick`) every `every` `period` ("seconds", "minutes", "hours", "days")."""

    name: str  # how its row is found again (else by its task, when an operator renamed the row)
    task: str
    every: int
    period: str
    description: str
    # The kind of the job runs it sends (the schedules page shows the last one's outcome); "" for a
    # sweep that runs no job of its own (its beat row's last run is all there is).
    job_kind: str = ""


# Every beat schedule of the service, kept in django-celery-beat's tables by `schedules_sync`.
SCHEDULES: tuple[Schedule, ...] = (
    Schedule(
        name="Send job runs the broker never got; requeue runs whose worker died",
        task="governance.tasks.jobs_sweep",
        every=1,
        period="minutes",
        description="Sends queued job runs the broker never took or lost; requeues runs whose worker died.",
    ),
    Schedule(
        name="Retention: prune by every policy",
        task="governance.tasks.retention_prune_tick",
        every=1,
        period="days",
        description="Applies every retention policy once (one job run; batches; legal holds and busy threads skipped).",
        job_kind="retention_prune",
    ),
    Schedule(
        name="Verify the audit trail",
        task="governance.tasks.audit_verify_tick",
        every=1,
        period="days",
        description="Checks the audit hash chain against its anchors; a broken chain shows on the admin index and /readyz.",
        job_kind="audit_verify",
    ),
    Schedule(
        name="Prune expired facts",
        task="memoryapp.tasks.items_prune_tick",
        every=10,
        period="minutes",
        description="Removes facts whose time to live ran out (one job run at a time).",
        job_kind="items_prune",
    ),
    Schedule(
        name="Prune the access log",
        task="memoryapp.tasks.access_log_prune_tick",
        every=1,
        period="days",
        description="Deletes access log rows older than ACCESS_LOG_RETENTION_DAYS (one job run at a time).",
    ),
    Schedule(
        name="Embed what is not embedded yet",
        task="memoryapp.tasks.embed_sweep",
        every=5,
        period="minutes",
        description="Sends the embedding job of every agent with entries or items that have no vector yet.",
        job_kind="embedding",
    ),
    Schedule(
        name="Deliver change events to webhooks left behind",
        task="memoryapp.tasks.webhooks_sweep",
        every=1,
        period="minutes",
        description="Sends the delivery job of every active webhook behind its agent's events and not resting.",
        job_kind="webhook_delivery",
    ),
    Schedule(
        name="Consolidation: mark repeated and contradicted items stale",
        task="memoryapp.tasks.consolidation_dedupe_tick",
        every=1,
        period="hours",
        description="Sends each agent's dedupe pass (one job run per agent; caps CONSOLIDATION_MAX_*; needs a model).",
        job_kind="consolidation_dedupe",
    ),
    Schedule(
        name="Consolidation: fold lessons into the playbook",
        task="memoryapp.tasks.consolidation_fold_tick",
        every=1,
        period="hours",
        description="Sends each agent's fold of new lessons into its playbooks, or their drafts in playbook shadow mode.",
        job_kind="consolidation_fold",
    ),
    Schedule(
        name="Consolidation: refresh observations",
        task="memoryapp.tasks.consolidation_observations_tick",
        every=30,
        period="minutes",
        description="Sends each agent's refresh of the observations whose facts changed (OBSERVATIONS_*; needs a model).",
        job_kind="consolidation_observations",
    ),
)


def schedules_sync(*, apps: Any = None, using: str = "default", **signal_arguments: Any) -> None:
    """Keep SCHEDULES in the database (a post_migrate receiver; safe to run any number of times).

    1. A schedule's row is found by its name, else by its task (an operator renamed it).
    2. A missing row is created, enabled, with the declared interval and description: a deleted
       schedule comes back on the next migrate (to stop one, disable it).
    3. A found row gets the declared task path (a task that moved in a release) and, when it has
       none, the description; its interval, enabled flag and every other field are the
       operator's and are left as they are.
    """
    if apps is not None:
        try:
            apps.get_model("django_celery_beat", "PeriodicTask")
        except LookupError:
            return  # django-celery-beat is not migrated (yet) on this database
    rows = PeriodicTask.objects.using(using)
    for schedule in SCHEDULES:
        row = rows.filter(name=schedule.name).first() or rows.filter(task=schedule.task).order_by("pk").first()
        if row is None:
            every = (
                IntervalSchedule.objects.using(using)
                .filter(every=schedule.every, period=schedule.period)
                .order_by("pk")
                .first()
            ) or IntervalSchedule.objects.using(using).create(every=schedule.every, period=schedule.period)
            # The real model's save tells a running beat that its schedules changed.
            PeriodicTask(
                name=schedule.name,
                task=schedule.task,
                interval=every,
                enabled=True,
                description=schedule.description,
            ).save(using=using)
            continue
        if row.task != schedule.task or not row.description:
            row.task = schedule.task
            row.description = row.description or schedule.description
            row.save(using=using)
