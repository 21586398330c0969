"""Beat schedules: every one the service has (SCHEDULES), kept in django-celery-beat's tables on
every migrate (`schedules_sync`), and the schedules page's reads: each schedule with its row
(interval, enabled, last tick) and the outcome of the last job run it sent, so an operator sees at
a glance what runs when and whether it worked. The rows are edited in django-celery-beat's admin
(Periodic tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from governance.models import JobRun


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
        name="Erasure: finish erasures interrupted",
        task="governance.tasks.erasures_resume_tick",
        every=5,
        period="minutes",
        description=(
            "Runs again each erasure a killed process left a person marked by, when no request stands behind it,"
            " and each failed erasure request whose error passes by itself (at most 3 times, with backoff)."
        ),
        job_kind="erasure_resume",
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


_FINISHED = (JobRun.Status.SUCCEEDED, JobRun.Status.FAILED, JobRun.Status.SKIPPED)


@dataclass
class ScheduleState:
    schedule: Schedule
    row: PeriodicTask | None
    every: str
    next_run_at: datetime | None
    last_run: JobRun | None
    outcome: str


def _row(schedule: Schedule) -> PeriodicTask | None:
    return (
        PeriodicTask.objects.select_related("interval", "crontab")
        .filter(Q(name=schedule.name) | Q(task=schedule.task))
        .order_by("-enabled", "pk")
        .first()
    )


def _next(row: PeriodicTask) -> datetime | None:
    if not row.enabled or row.interval is None:
        return None
    step = timedelta(**{row.interval.period: row.interval.every})
    start = row.last_run_at or row.start_time or row.date_changed
    upcoming = (start or timezone.now()) + step
    return max(upcoming, timezone.now())


def schedule_next_run(task: str) -> tuple[datetime | None, bool]:
    """When the schedule of `task` is due next (None when disabled or not an interval), and whether it is on."""
    row = PeriodicTask.objects.select_related("interval").filter(task=task).order_by("-enabled", "pk").first()
    if row is None:
        return None, False
    return _next(row), bool(row.enabled)


def _outcome(run: JobRun | None) -> str:
    if run is None:
        return ""
    if run.status == JobRun.Status.FAILED:
        return f"failed: {run.error.splitlines()[0][:160] if run.error else ''}"
    if run.status == JobRun.Status.SKIPPED:
        return f"skipped: {(run.result or {}).get('skipped', '')}"[:180]
    result = run.result or {}
    if "ok" in result and not result["ok"]:
        return f"BROKEN at seq {result.get('first_broken')}: {result.get('reason', '')}"[:200]
    counts: dict[str, object] = result["counts"] if isinstance(result.get("counts"), dict) else result
    shown = [f"{k} {v}" for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool) and v]
    return "succeeded" + (f": {', '.join(shown[:6])}" if shown else "")


def _interval_words(every: int, period: str) -> str:
    """The interval in words ("every minute", "every 10 minutes"): beat keeps the period plural."""
    return f"every {period.removesuffix('s')}" if every == 1 else f"every {every} {period}"


def schedules_state() -> list[ScheduleState]:
    """One line per declared schedule, in SCHEDULES' order (one query for each: a handful)."""
    states = []
    for schedule in SCHEDULES:
        row = _row(schedule)
        last = None
        if schedule.job_kind:
            last = (
                JobRun.objects.filter(kind=schedule.job_kind, status__in=_FINISHED)
                .order_by("-finished_at", "-pk")
                .only("pk", "status", "result", "error", "finished_at", "kind")
                .first()
            )
        every = ""
        if row is not None and row.interval is not None:
            every = _interval_words(row.interval.every, row.interval.period)
        elif row is not None and row.crontab is not None:
            every = f"cron {row.crontab}"
        states.append(
            ScheduleState(
                schedule=schedule,
                row=row,
                every=every,
                next_run_at=_next(row) if row is not None else None,
                last_run=last,
                outcome=_outcome(last),
            )
        )
    return states
