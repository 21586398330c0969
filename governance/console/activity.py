"""Aggregate reads for the staff overview (admin index): how much agents wrote, day by day.

Each is one GROUP BY over a bounded window of time (a block range index on the time column skips
everything older), never a read of rows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Coalesce, TruncDay
from django.utils import timezone

from memoryapp.models import Agent, Entry, MemoryItem

# Agents drawn as their own series; the rest are summed as "other agents" (a chart stays readable).
AGENTS_DRAWN = 6


@dataclass
class PerAgentPerDay:
    days: list[date]
    series: list[tuple[str, list[int]]]  # (agent slug, count per day), the busiest agent first


def window_days(*, days: int, now: datetime | None = None) -> tuple[datetime, list[date]]:
    """The start of a window of `days` whole UTC days ending today, and its days."""
    today = (now or timezone.now()).astimezone(timezone.get_fixed_timezone(0)).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=timezone.get_fixed_timezone(0))
    return start, [first + timedelta(days=i) for i in range(days)]


def _per_agent_per_day(rows: QuerySet, *, time_field: str, days: int) -> PerAgentPerDay:
    start, day_list = window_days(days=days)
    counted = (
        rows.filter(**{f"{time_field}__gte": start})
        .annotate(day=TruncDay(time_field, tzinfo=timezone.get_fixed_timezone(0)))
        .values("agent_id", "day")
        .annotate(n=Count("pk"))
        .order_by()
    )
    per_agent: dict[int, dict[date, int]] = defaultdict(dict)
    for row in counted:
        per_agent[row["agent_id"]][row["day"].date()] = row["n"]
    busiest = sorted(per_agent, key=lambda a: -sum(per_agent[a].values()))
    slugs = dict(Agent.objects.filter(pk__in=busiest[:AGENTS_DRAWN]).values_list("pk", "slug"))
    series = [(slugs.get(a, f"agent {a}"), [per_agent[a].get(d, 0) for d in day_list]) for a in busiest[:AGENTS_DRAWN]]
    rest = busiest[AGENTS_DRAWN:]
    if rest:
        series.append((f"{len(rest)} other agents", [sum(per_agent[a].get(d, 0) for a in rest) for d in day_list]))
    return PerAgentPerDay(days=day_list, series=series)


def entries_per_agent_per_day(*, days: int = 30) -> PerAgentPerDay:
    """Entries by the day this service stored them (`stored_at`), not the `created_at` a client gave
    (an import of old conversations is stored today); entries stored before that column existed
    count on their `created_at`, all that is known of them."""
    start, _ = window_days(days=days)
    recent = Entry.objects.filter(Q(stored_at__gte=start) | Q(stored_at__isnull=True, created_at__gte=start))
    return _per_agent_per_day(
        recent.annotate(stored=Coalesce("stored_at", "created_at")), time_field="stored", days=days
    )


def items_per_agent_per_day(*, days: int = 30) -> PerAgentPerDay:
    return _per_agent_per_day(MemoryItem.objects.all(), time_field="recorded_at", days=days)
