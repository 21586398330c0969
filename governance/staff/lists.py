"""What the admin's long lists share: cells that fit (text cut with the whole of it on hover, long
ids shortened, moments in one short form), the width of the screen (no navigation sidebar on
them), and a filter of a moment column from one day to another.

The lists of entries, audit records and job runs hold many columns a person needs at once; at
1,280 px they fit only with the sidebar folded away, as the review queue does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta
from typing import Any
from urllib.parse import parse_qsl

from django.contrib import admin
from django.db.models import Field, Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

# Ids longer than this are shown shortened in a list cell (all of the id on hover and in the link).
SHORT_ID = 16


def cell_text(text: str, limit: int) -> SafeString:
    """The text on one line cut to `limit` characters, the whole of it (up to 2,000) on hover."""
    flat = " ".join((text or "").split())
    shown = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return format_html('<span class="cell-text" title="{}">{}</span>', flat[:2000], shown)


def short_id(value: str) -> str:
    """`ent_01m8r1yv…7g6k`: the prefix and both ends of an id tell ids on a page apart."""
    return value if len(value) <= SHORT_ID else f"{value[:10]}…{value[-4:]}"


def id_cell(value: str, limit: int = 40) -> SafeString:
    """A client-chosen id (up to 128 characters, no space to break at) in a cell: both ends of it,
    at most `limit` characters, wrapping anywhere; all of it on hover."""
    shown = value if len(value) <= limit else f"{value[: limit - 9]}…{value[-8:]}"
    return format_html('<span class="cell-id" title="{}">{}</span>', value, shown)


def words(key: str) -> str:
    """A key of stored JSON in words: `branches_deleted` -> `branches deleted`."""
    return key.replace("_", " ").replace(".", " ").strip()


def details_text(details: Any) -> str:
    """Audit details or a job's result as a person reads them: `branches deleted 1 · entries deleted 120`;
    a list says how many it holds (`item ids: 64`), a nested count its own words."""
    if not isinstance(details, dict):
        return "" if details in (None, "") else str(details)
    parts = []
    for key, value in details.items():
        if isinstance(value, list):
            parts.append(f"{words(key)}: {len(value)}")
        elif isinstance(value, dict):
            inner = details_text(value)
            parts.append(f"{words(key)} ({inner})" if inner else words(key))
        elif isinstance(value, bool):
            parts.append(f"{words(key)}: {'yes' if value else 'no'}")
        elif value in (None, ""):
            continue
        else:
            parts.append(f"{words(key)} {value}")
    return " · ".join(parts)


def moment(at: datetime | None) -> SafeString:
    """A moment to the minute, the exact one on hover."""
    if at is None:
        return SafeString("")
    local = timezone.localtime(at)
    return format_html('<span title="{}">{}</span>', local.isoformat(), local.strftime("%Y-%m-%d %H:%M"))


def day(at: datetime | None) -> SafeString:
    """The day of a moment, the exact moment on hover: for lists with several moment columns."""
    if at is None:
        return format_html("{}", "")
    local = timezone.localtime(at)
    return format_html('<span title="{}">{}</span>', local.isoformat(), local.strftime("%Y-%m-%d"))


def presence_filter(title: str, *, empty: str, present: str) -> type[admin.EmptyFieldListFilter]:
    """Django's filter of an empty or filled column ("By lifted at: Empty / Not empty"), in the
    domain's words: `("lifted_at", presence_filter("in force", empty="in force", present="lifted"))`."""

    class PresenceFilter(admin.EmptyFieldListFilter):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.title = title

        def choices(self, changelist: Any) -> Iterator[Any]:
            for n, choice in enumerate(super().choices(changelist)):
                # Django's order: All, Empty, Not empty; with "show counts", each ends with " (n)".
                if n in (1, 2):
                    count = re.search(r" \(\d+\)$", str(choice["display"]))
                    choice["display"] = (empty, present)[n - 1] + (count.group(0) if count else "")
                yield choice

    return PresenceFilter


class FullWidthList:
    """A ModelAdmin mixin: its list takes the whole width (the navigation sidebar is left out)."""

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        context = {"is_nav_sidebar_enabled": False, **(extra_context or {})}
        return super().changelist_view(request, extra_context=context)  # type: ignore[misc]


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
        # "By at", "By created at": the column's name; the filter picks days.
        self.title = "day" if field_path == "at" else f"day {words(field_path).removesuffix(' at')}"

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
