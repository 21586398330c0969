"""The schedules page: every beat schedule of SCHEDULES with its row (interval, enabled, last
tick) and the outcome of the last job run it sent, so an operator sees at a glance what runs
when and whether it worked. The rows are edited in django-celery-beat's admin (Periodic tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from governance.jobs.runs import SCHEDULES, Schedule
from governance.models import JobRun

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
