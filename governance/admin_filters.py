"""A list filter of the admin for a moment column: from one day to another (both days included),
typed as dates, with shortcuts for the last day, week and month. Used by the audit trail and the
job runs, whose tables grow without end: the filter is a range on their indexed time column."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from typing import Any
from urllib.parse import parse_qsl

from django.contrib import admin
from django.db.models import Field, Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone


def _day(value: Any) -> date | None:
    if isinstance(value, list):
        value = value[-1] if value else None
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        return None


class DateRangeFilter(admin.FieldListFilter):
    template = "admin/governance/date_range_filter.html"

    def __init__(
        self,
        field: Field[Any, Any],
        request: HttpRequest,
        params: dict[str, Any],
        model: type[Model],
        model_admin: admin.ModelAdmin[Any],
        field_path: str,
    ) -> None:
        self.parameter_from = f"{field_path}_from"
        self.parameter_to = f"{field_path}_to"
        super().__init__(field, request, params, model, model_admin, field_path)
        self.day_from = _day(self.used_parameters.get(self.parameter_from))
        self.day_to = _day(self.used_parameters.get(self.parameter_to))

    def expected_parameters(self) -> list[str | None]:
        return [self.parameter_from, self.parameter_to]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        zone = timezone.get_current_timezone()
        if self.day_from:
            queryset = queryset.filter(**{f"{self.field_path}__gte": datetime.combine(self.day_from, time(), zone)})
        if self.day_to:
            end = datetime.combine(self.day_to + timedelta(days=1), time(), zone)
            queryset = queryset.filter(**{f"{self.field_path}__lt": end})
        return queryset

    def choices(self, changelist: Any) -> Iterator[Any]:
        today = timezone.localdate()
        kept = changelist.get_query_string(remove=[self.parameter_from, self.parameter_to, "p"])
        yield {
            "parameter_from": self.parameter_from,
            "parameter_to": self.parameter_to,
            "value_from": self.day_from.isoformat() if self.day_from else "",
            "value_to": self.day_to.isoformat() if self.day_to else "",
            # The other filters of the page, kept when this form is sent.
            "kept": parse_qsl(kept.lstrip("?"), keep_blank_values=True),
            "clear": kept,
            "shortcuts": [
                (
                    label,
                    changelist.get_query_string(
                        {self.parameter_from: (today - timedelta(days=days)).isoformat()}, [self.parameter_to, "p"]
                    ),
                )
                for label, days in (("today", 0), ("last 7 days", 6), ("last 30 days", 29))
            ],
        }
