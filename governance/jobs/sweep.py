"""The job sweep (beat, every minute): runs whose worker died are requeued, runs the broker never
got or lost are sent again; `jobs_waiting` tells which runs no worker takes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db.models import Count, Min, Q
from django.utils import timezone

from governance.jobs.broker import broker_epoch, broker_redis, job_send
from governance.jobs.runs import LOST_RUN_MAX_ATTEMPTS, WAITING_NOTE, job_fail, job_task, run_lock_release, run_lock_try
from governance.models import JobRun

logger = logging.getLogger(__name__)

Status = JobRun.Status

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
        if not run_lock_try(run_id):
            continue  # its process is alive
        try:
            outcome = _requeue_lost(run_id)
        finally:
            run_lock_release(run_id)
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
