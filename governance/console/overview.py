"""The staff overview on the admin index: what each role comes to check first.

- Reviewers: the backlog of suggested items, how old its oldest is, the agents it is on.
- Privacy officers: the erasure requests waiting, running, failed or blocked; the audit chain's
  state and the redactions, deletions and erasures of the last days.
- Operators and privacy officers: retention (the last prune and what it removed, the legal holds
  in force, the next scheduled run) and the newest daily verification of the whole audit chain.
- Operators: failed jobs of the last day, the broker and the database answering, and charts over
  30 days (entries and items per agent per day, review decisions per day, job durations).

Which sections a person sees follows the permission that defines each role (`ROLE_MARKERS`); a
superuser sees all. Every figure is an aggregate over a bounded window (GROUP BY day or kind), and
the chart figures are kept for CHART_CACHE_SECONDS in the cache, so a busy index page does not
aggregate 30 days on every load.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.core.cache import cache
from django.db import connection
from django.db.models import Count
from django.db.models.functions import TruncDay
from django.urls import reverse
from django.utils import timezone

from governance.audit.chain import AuditVerification, audit_verification_latest, audit_verify_tail
from governance.console.activity import entries_per_agent_per_day, items_per_agent_per_day, window_days
from governance.console.charts import PALETTE, Duration, Series, duration_bars, stacked_bars_by_day
from governance.console.review import Backlog, review_backlog
from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.retention.services import RetentionState, retention_state
from memory_project.health import broker_probe, database_probe
from memoryapp.search.space import vector_space_status

# The permission only that role's group holds among the three (governance/staff/roles.py).
ROLE_MARKERS = {
    "reviewer": "memoryapp.change_memoryitem",
    "privacy": "memoryapp.delete_entry",
    "operator": "memoryapp.change_agent",
}
CHART_DAYS = 30
OTHERS = "#9e9e9e"  # the agents summed as one series
CHART_CACHE_SECONDS = 120
PRIVACY_DAYS = 7
AUDIT_TAIL_RECORDS = 500
# Audit actions that took something away, as the privacy section counts them.
REMOVALS = (
    ("entry.redact", "entries redacted"),
    ("entry.delete", "entries deleted"),
    ("thread.delete", "threads deleted"),
    ("memory_files.redact", "file versions redacted"),
    ("lineage.forget", "derived memory removed with its source"),
    ("item.forgotten", "items forgotten"),
    ("facts.forgotten", "fact namespaces forgotten"),
    ("erasure.done", "erasure requests done"),
)
DECISION_OUTCOMES = (
    ("approved", ("approved", "approved_edited")),
    ("rejected", ("rejected",)),
    ("undone", ("undone",)),
)


def roles_of(user: Any) -> set[str]:
    if not (user.is_active and user.is_staff):
        return set()
    return {role for role, permission in ROLE_MARKERS.items() if user.has_perm(permission)}


# --- reviewers -------------------------------------------------------------------------------------


@dataclass
class ReviewSection:
    backlog: Backlog
    oldest_age: timedelta | None
    queue_url: str
    agents: list[dict[str, Any]]


def review_section() -> ReviewSection:
    backlog = review_backlog()
    queue = reverse("admin:memoryapp_memoryitem_review")
    now = timezone.now()
    agents = [
        {**row, "url": f"{queue}?agent={row['agent_id']}&order=oldest", "age": now - row["oldest"]}
        for row in backlog.agents
    ]
    return ReviewSection(
        backlog=backlog,
        oldest_age=(now - backlog.oldest_at) if backlog.oldest_at else None,
        queue_url=f"{queue}?order=oldest",
        agents=agents,
    )


# --- privacy officers ------------------------------------------------------------------------------


@dataclass
class PrivacySection:
    audit: AuditVerification
    audit_records: int
    removals: list[dict[str, Any]]
    days: int
    verify_url: str
    audit_url: str
    # Erasure requests by status, of those not done (queued, running, failed, blocked), and their list.
    erasures: dict[str, int] = field(default_factory=dict)
    erasures_url: str = ""


def privacy_section() -> PrivacySection:
    since = timezone.now() - timedelta(days=PRIVACY_DAYS)
    counted = dict(
        AuditRecord.objects.filter(action__in=[a for a, _ in REMOVALS], at__gte=since)
        .values("action")
        .annotate(n=Count("id"))
        .values_list("action", "n")
    )
    audit_list = reverse("admin:governance_auditrecord_changelist")
    newest = AuditRecord.objects.order_by("-seq").values_list("seq", flat=True).first() or 0
    return PrivacySection(
        audit=audit_verify_tail(records=AUDIT_TAIL_RECORDS),
        audit_records=newest,
        removals=[
            {
                "action": action,
                "label": label,
                "count": counted.get(action, 0),
                "url": f"{audit_list}?action__exact={action}",
            }
            for action, label in REMOVALS
        ],
        days=PRIVACY_DAYS,
        verify_url=reverse("admin:governance_auditrecord_verify"),
        audit_url=audit_list,
        erasures=dict(
            ErasureRequest.objects.exclude(status=ErasureRequest.Status.DONE)
            .values("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        ),
        erasures_url=reverse("admin:governance_erasurerequest_changelist"),
    )


# --- operators -------------------------------------------------------------------------------------


@dataclass
class Health:
    name: str
    ok: bool
    detail: str
    millis: float


@dataclass
class OperatorSection:
    health: list[Health]
    failures: int
    failures_by_kind: list[dict[str, Any]]
    failures_url: str
    running: int
    queued: int
    charts: list[Any] = field(default_factory=list)
    charts_at: datetime | None = None
    # Set when the stored vectors are not the configured model's (memoryapp.search.space).
    vector_space: str = ""
    vector_channel: bool = True


def _timed(name: str, probe: Any) -> Health:
    started = time.perf_counter()
    ok, detail = probe()
    return Health(name=name, ok=ok, detail=detail, millis=(time.perf_counter() - started) * 1000)


def job_runs_url(**filters: str) -> str:
    """The job-run list filtered; a date filter only when that list offers one (else it refuses it)."""
    changelist = reverse("admin:governance_jobrun_changelist")
    try:
        run_filters = admin.site.get_model_admin(JobRun).list_filter
    except NotRegistered:
        run_filters = ()
    offered = {f if isinstance(f, str) else f[0] for f in run_filters if isinstance(f, str | tuple | list)}
    # A lookup (`status__exact`) names its field before `__`; the date range filter's own parameters
    # (`created_at_from`) name it before `_from` / `_to`.
    query = {
        k: v
        for k, v in filters.items()
        if k.split("__", 1)[0] in offered or k.removesuffix("_from").removesuffix("_to") in offered
    }
    return changelist + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def operator_section() -> OperatorSection:
    since = timezone.now() - timedelta(days=1)
    failed: list[dict[str, Any]] = [
        dict(row)
        for row in JobRun.objects.filter(status=JobRun.Status.FAILED, created_at__gte=since)
        .values("kind")
        .annotate(n=Count("id"))
        .order_by("-n", "kind")
    ]
    open_runs = dict(
        JobRun.objects.filter(status__in=[JobRun.Status.RUNNING, JobRun.Status.QUEUED])
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    section = OperatorSection(
        health=[_timed("database", database_probe), _timed("broker (Redis ping)", broker_probe)],
        failures=sum(int(row["n"]) for row in failed),
        failures_by_kind=failed,
        failures_url=job_runs_url(status__exact="failed", created_at_from=timezone.localdate(since).isoformat()),
        running=open_runs.get(JobRun.Status.RUNNING, 0),
        queued=open_runs.get(JobRun.Status.QUEUED, 0),
    )
    section.charts, section.charts_at = operator_charts()
    space = vector_space_status()
    if space.stale or not space.ready:
        section.vector_space, section.vector_channel = space.message, space.ok
    return section


def operator_charts() -> tuple[list[Any], datetime]:
    """The four charts, drawn from figures at most CHART_CACHE_SECONDS old."""
    figures = cache.get("staff-overview:figures:v1")
    if figures is None:
        figures = {
            "entries": entries_per_agent_per_day(days=CHART_DAYS),
            "items": items_per_agent_per_day(days=CHART_DAYS),
            "decisions": review_decisions_per_day(days=CHART_DAYS),
            "durations": job_durations(days=CHART_DAYS),
            "at": timezone.now(),
        }
        cache.set("staff-overview:figures:v1", figures, CHART_CACHE_SECONDS)
    entries, items, decisions = figures["entries"], figures["items"], figures["decisions"]
    # One colour per agent in both charts (by name), the agents not drawn one by one in grey.
    names = sorted({name for name, _ in (*entries.series, *items.series) if not name.endswith("other agents")})
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    charts = [
        stacked_bars_by_day(
            title=f"Entries stored per agent per day ({CHART_DAYS} days, UTC)",
            days=entries.days,
            series=[Series(name, values, colours.get(name, OTHERS)) for name, values in entries.series],
            unit="entries",
        ),
        stacked_bars_by_day(
            title=f"Memory items stored per agent per day ({CHART_DAYS} days)",
            days=items.days,
            series=[Series(name, values, colours.get(name, OTHERS)) for name, values in items.series],
            unit="items",
        ),
        stacked_bars_by_day(
            title=f"Review decisions per day ({CHART_DAYS} days)",
            days=decisions[0],
            series=[
                Series(name, values, colour)
                for (name, values), colour in zip(decisions[1], ("#59a14f", "#e15759", "#9c755f"), strict=True)
            ],
            unit="decisions",
        ),
        duration_bars(title=f"Job durations by kind ({CHART_DAYS} days)", rows=figures["durations"]),
    ]
    return charts, figures["at"]


def review_decisions_per_day(*, days: int) -> tuple[list[Any], list[tuple[str, list[int]]]]:
    """Reviewers' decisions per day by outcome, from the audit chain (`item.reviewed`)."""
    start, day_list = window_days(days=days)
    counted = (
        AuditRecord.objects.filter(action="item.reviewed", at__gte=start)
        .annotate(day=TruncDay("at", tzinfo=timezone.get_fixed_timezone(0)))
        .values("day", "outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    per_day: dict[tuple[Any, str], int] = {}
    for row in counted:
        key = (row["day"].date(), row["outcome"])
        per_day[key] = per_day.get(key, 0) + row["n"]
    series = [
        (name, [sum(per_day.get((d, o), 0) for o in outcomes) for d in day_list])
        for name, outcomes in DECISION_OUTCOMES
    ]
    return day_list, series


def job_durations(*, days: int, kinds: int = 12) -> list[Duration]:
    """Median and 95th percentile of the run time of each job kind's finished runs (the busiest kinds)."""
    since = timezone.now() - timedelta(days=days)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT kind, count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)),
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at))
              FROM governance_jobrun
             WHERE created_at >= %s AND started_at IS NOT NULL AND finished_at IS NOT NULL
               AND status IN ('succeeded', 'failed')
             GROUP BY kind
             ORDER BY count(*) DESC, kind
             LIMIT %s
            """,
            [since, kinds],
        )
        return [Duration(kind=k, runs=n, p50=float(p50), p95=float(p95)) for k, n, p50, p95 in cursor.fetchall()]


# --- retention (operators and privacy officers) ------------------------------------------------------


@dataclass
class RetentionSection:
    state: RetentionState
    # The newest daily verification of the whole audit chain (None: none ran yet).
    audit: dict[str, Any] | None
    policies_url: str
    prune_url: str
    schedules_url: str
    holds_url: str  # "" for those who may not see the holds


def retention_section(user: Any) -> RetentionSection:
    holds_url = reverse("admin:memoryapp_legalhold_changelist") if user.has_perm("memoryapp.view_legalhold") else ""
    return RetentionSection(
        state=retention_state(),
        audit=audit_verification_latest(),
        policies_url=reverse("admin:memoryapp_retentionpolicy_changelist"),
        prune_url=reverse("admin:memoryapp_retentionpolicy_prune") if user.has_perm("memoryapp.run_prune") else "",
        schedules_url=reverse("admin:governance_jobrun_schedules"),
        holds_url=f"{holds_url}?lifted_at__isnull=True" if holds_url else "",
    )


def overview_for(user: Any) -> dict[str, Any]:
    roles = roles_of(user)
    return {
        "roles": roles,
        "review": review_section() if "reviewer" in roles else None,
        "privacy": privacy_section() if "privacy" in roles else None,
        "operator": operator_section() if "operator" in roles else None,
        "retention": retention_section(user) if roles & {"privacy", "operator"} else None,
    }
