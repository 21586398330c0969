"""The hand-over of runs to the broker: `job_send`, `job_enqueue` (by task name, after commit),
the breaker that rests from a broker that just failed, the debounce marks of jobs asked for on
every write, and `broker_epoch` (since when the broker has kept its data)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import time
from datetime import datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from kombu.exceptions import OperationalError

from governance.jobs.redis_io import redis_command
from governance.jobs.runs import job_task, thread_run_current
from governance.models import JobRun

logger = logging.getLogger(__name__)

Status = JobRun.Status


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
    `countdown` seconds). Asked for while a thread run's request is served (`thread_run_cause`),
    its arguments name that run (`thread_run_id`).

    With a dedupe_key, a run of that key still queued is reused instead of adding another; if the
    broker never took it (it was away), it is sent again now. A name no app declares is a
    programming error, raised here, before anything is written.
    """
    if job_task(task_name) is None:
        raise LookupError(f"no job task is named {task_name!r}")
    cause = thread_run_current()
    if cause:
        arguments = {**arguments, "thread_run_id": cause}
    with transaction.atomic():
        if dedupe_key:
            waiting = (
                JobRun.objects.select_for_update()
                .filter(dedupe_key=dedupe_key, status=Status.QUEUED)
                .order_by("-created_at")
                .first()
            )
            if waiting is not None:
                if cause and not (waiting.arguments or {}).get("thread_run_id"):
                    # The run a thread run's write joins is caused by it too (the first such run).
                    waiting.arguments = {**(waiting.arguments or {}), "thread_run_id": cause}
                    JobRun.objects.filter(pk=waiting.pk).update(arguments=waiting.arguments)
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
        # SET NX EX, without redis-py's layers of a command (a round trip of every append): its
        # reply is OK when the key was set, nil when it was there already.
        fresh = redis_command(broker_redis(), "SET", key, "1", "NX", "EX", ttl) is not None
    except redis.RedisError:
        _broker_failed()
        return True
    _broker_answered()
    return fresh


def job_debounce_clear(debounce_key: str) -> None:
    """Called by a debounced job as it starts: later writes send another run."""
    with contextlib.suppress(redis.RedisError):
        broker_redis().delete(debounce_mark(debounce_key))


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
