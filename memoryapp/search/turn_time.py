"""The time a question names, and the turn channel that finds the turns of that time (004).

`named_time(text, anchor, zone)` reads the time a question names without a model: a year ("in
2022"), a month ("last May", "in March 2023"), a day ("on 7 May", "May 7, 2023", "yesterday",
"last Saturday"), a week, month or year relative to now ("last week", "this month", "two weeks
ago", "a few days ago"), or a span relative to an event of the thread ("two weeks before the
trip": the date of the best turn about the trip, moved by the span). It answers an interval
[start, end) in the thread's time zone with its precision (day, week, month, year); `anchor` is
"now" for the question: the search's `as_of`, else the newest turn of the scope.

The channel, `time`:
1. A question that names a time: the turns written in that interval and the turns that state it
   (its year, or its month's name, in their words), ranked by cosine to the question (the
   vector channel's order; without a vector, newest first).
2. A question that asks for a time and names none ("When did Ana go to Lisbon?"): the turns that
   state a time ("yesterday", "last week", "ago", a weekday or a month), ranked by cosine. The
   turn that says "I went to Lisbon yesterday" holds the answer; its date is the turn's.
Anything else: no rows.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.db import connection

from governance.crypto.keyring import encryption_enabled
from memoryapp.search.channels import ENTRY, Channel, ChannelInput, register
from memoryapp.search.keyword import ChannelHit, entry_scope_size, keyword_entries
from memoryapp.search.query import KIND_TEMPORAL, analyze_query
from memoryapp.search.scope import EntryScope
from memoryapp.search.vector import WALK_FROM_SCOPE, nearest_matching, read_exactly

DAY, WEEK, MONTH, YEAR = "day", "week", "month", "year"
MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name and name != "May"})
MONTHS["sept"] = 9
WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
UNIT_DAYS = {DAY: 1, WEEK: 7, MONTH: 30, YEAR: 365}
# Words of a turn that states a time (Postgres english lexemes; "may" is a stop word there).
TIME_WORDS = (
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "ago",
    "week",
    "weekend",
    "month",
    "year",
    "recently",
    *(d for d in WEEKDAYS),
    *(m for m in calendar.month_name[1:] if m.lower() != "may"),
)


@dataclass(frozen=True)
class TimeSpan:
    start: datetime
    end: datetime  # exclusive
    precision: str  # day | week | month | year


def zone_of(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name) if name else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _day(at: datetime) -> datetime:
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_span(year: int, month: int, tz: tzinfo) -> TimeSpan:
    start = datetime(year, month, 1, tzinfo=tz)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=tz)
    return TimeSpan(start, end, MONTH)


def _day_span(at: datetime) -> TimeSpan:
    start = _day(at)
    return TimeSpan(start, start + timedelta(days=1), DAY)


def _around(at: datetime, unit: str) -> TimeSpan:
    """The interval of one unit around an instant ("two weeks ago": that week)."""
    half = timedelta(days=UNIT_DAYS[unit]) / 2
    if unit == DAY:
        return _day_span(at)
    return TimeSpan(_day(at - half), _day(at + half) + timedelta(days=1), unit)


_NUMBER = (
    r"(\d+|a couple of|couple of|a few|few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
)
_UNIT = r"(day|week|month|year)s?"
_MONTH = r"(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_AGO = re.compile(rf"\b{_NUMBER} {_UNIT} ago\b")
_RELATIVE_EVENT = re.compile(rf"\b{_NUMBER} {_UNIT} (before|after) (.+?)(?:[?.!,;]|$)")
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?{_MONTH}(?:,? (\d{{4}}))?\b")
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH} (\d{{1,2}})(?:st|nd|rd|th)?(?:,? (\d{{4}}))?\b")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},? (\d{{4}})\b")
_REL_MONTH = re.compile(rf"\b(last|this|next|in|since|during|early|late|mid) {_MONTH}\b")
_REL_PERIOD = re.compile(r"\b(last|this|past|previous|next) (week|weekend|month|year)\b")
_REL_WEEKDAY = re.compile(r"\b(last|this|next|on) (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b")
_YEAR = re.compile(r"\b(?:in|during|of|since|from) ((?:19|20)\d\d)\b|\b((?:19|20)\d\d)\b")
_ISO_DAY = re.compile(r"\b((?:19|20)\d\d)[-/](\d{1,2})[-/](\d{1,2})\b")


def _count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS.get(word, 1)


def named_time(
    text: str,
    anchor: datetime,
    zone: ZoneInfo | None = None,
    *,
    event_date: Callable[[str], datetime | None] | None = None,
) -> TimeSpan | None:
    """The interval the text names, resolved against `anchor` in `zone` (see the module's doc);
    None when it names no time. `event_date(words)` dates an event the text names ("the trip")."""
    lowered = " ".join((text or "").lower().split())
    tz: tzinfo = zone or UTC
    now = anchor.astimezone(tz)
    if found := _ISO_DAY.search(lowered):
        try:
            return _day_span(datetime(int(found[1]), int(found[2]), int(found[3]), tzinfo=tz))
        except ValueError:
            pass
    if found := _DAY_MONTH_YEAR.search(lowered):
        day, month, year = int(found[1]), MONTHS[found[2]], int(found[3]) if found[3] else None
        if span := _dated(day, month, year, now):
            return span
    if found := _MONTH_DAY_YEAR.search(lowered):
        month, day, year = MONTHS[found[1]], int(found[2]), int(found[3]) if found[3] else None
        if span := _dated(day, month, year, now):
            return span
    if found := _MONTH_YEAR.search(lowered):
        return _month_span(int(found[2]), MONTHS[found[1]], tz)
    if event_date is not None and (found := _RELATIVE_EVENT.search(lowered)):
        when = event_date(found[4])
        if when is not None:
            unit = found[2]
            shift = timedelta(days=UNIT_DAYS[unit] * _count(found[1]))
            return _around(when.astimezone(tz) + (shift if found[3] == "after" else -shift), unit)
    if found := _AGO.search(lowered):
        unit = found[2]
        return _around(now - timedelta(days=UNIT_DAYS[unit] * _count(found[1])), unit)
    if re.search(r"\byesterday\b", lowered):
        return _day_span(now - timedelta(days=1))
    if re.search(r"\btoday\b|\bthis morning\b|\btonight\b", lowered):
        return _day_span(now)
    if found := _REL_WEEKDAY.search(lowered):
        target = WEEKDAYS[found[2]]
        back = (now.weekday() - target) % 7 or 7
        if found[1] == "next":
            return _day_span(now + timedelta(days=(target - now.weekday()) % 7 or 7))
        return _day_span(now - timedelta(days=back))
    if found := _REL_PERIOD.search(lowered):
        which, period = found[1], found[2]
        step = {"last": -1, "past": -1, "previous": -1, "this": 0, "next": 1}[which]
        if period in ("week", "weekend"):
            monday = _day(now) - timedelta(days=now.weekday()) + timedelta(weeks=step)
            if period == "weekend":
                return TimeSpan(monday + timedelta(days=5), monday + timedelta(days=7), DAY)
            return TimeSpan(monday, monday + timedelta(days=7), WEEK)
        if period == "month":
            index = now.year * 12 + now.month - 1 + step
            return _month_span(index // 12, index % 12 + 1, tz)
        return TimeSpan(
            datetime(now.year + step, 1, 1, tzinfo=tz), datetime(now.year + step + 1, 1, 1, tzinfo=tz), YEAR
        )
    if found := _REL_MONTH.search(lowered):
        which, month = found[1], MONTHS[found[2]]
        if which == "last":  # the last such month before this one
            year = now.year if month < now.month else now.year - 1
        elif which == "next":
            year = now.year if month > now.month else now.year + 1
        elif which == "this":
            year = now.year
        else:  # "in May": the last May up to now
            year = now.year if month <= now.month else now.year - 1
        return _month_span(year, month, tz)
    if found := _YEAR.search(lowered):
        year = int(found[1] or found[2])
        return TimeSpan(datetime(year, 1, 1, tzinfo=tz), datetime(year + 1, 1, 1, tzinfo=tz), YEAR)
    return None


def _dated(day: int, month: int, year: int | None, now: datetime) -> TimeSpan | None:
    """A day of a month, in the year given, else the last such day up to now."""
    try:
        at = datetime(year or now.year, month, day, tzinfo=now.tzinfo)
    except ValueError:
        return None
    if year is None and at > now:
        try:
            at = at.replace(year=at.year - 1)
        except ValueError:
            return None
    return _day_span(at)


class EventDate:
    """Dates an event the question names by the newest of its best turns (keyword channel)."""

    def __init__(self, scope: EntryScope) -> None:
        self.scope = scope

    def __call__(self, words: str) -> datetime | None:
        analysis = analyze_query(words)
        if not analysis.terms:
            return None
        hits = keyword_entries(scope=self.scope, analysis=analysis, limit=1)
        if not hits:
            return None
        with connection.cursor() as cursor:
            cursor.execute("SELECT created_at FROM memoryapp_entry WHERE id = %s", [hits[0].id])
            row = cursor.fetchone()
        return row[0] if row else None


def scope_anchor(scope: EntryScope) -> datetime | None:
    """ "Now" for a question without `as_of`: the newest turn of the scope (a thread's last turn)."""
    where, params = scope.where("e")
    order = "e.seq DESC" if scope.thread_pk is not None else "e.created_at DESC"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT e.created_at FROM memoryapp_entry e WHERE {where} ORDER BY {order} LIMIT 1", params)
        row = cursor.fetchone()
    return row[0] if row else None


def asks_for_time(text: str) -> bool:
    """A question that asks when something happened (and may name no time)."""
    lowered = (text or "").lower()
    return bool(
        re.search(r"\b(when|what (time|date|day|year|month)|which (year|month|day|date)|how long ago)\b", lowered)
    )


def _ranked(ci: ChannelInput, condition: str, params: dict[str, Any]) -> list[ChannelHit]:
    """The scope's rows that meet `condition`, by cosine to the question (newest first without a vector)."""
    if ci.vector is not None:
        # A scope the vector channel reads exactly is read exactly here too: the rows meeting the
        # condition are fewer still (memoryapp.search.vector.read_exactly).
        walk = entry_scope_size(ci.scope) >= WALK_FROM_SCOPE and not read_exactly(ci.scope, ci.depth)
        return nearest_matching(
            scope=ci.scope,
            condition=condition,
            params=params,
            vector=ci.vector,
            limit=ci.depth,
            walk=walk,
            memo=ci.memo,
        )
    where, scope_params = ci.scope.where("e")
    params = {**scope_params, **params, "n": ci.depth}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id, 0.0 FROM memoryapp_entry e WHERE {where} AND ({condition})"
            " ORDER BY e.created_at DESC, e.seq DESC LIMIT %(n)s",
            params,
        )
        rows = cursor.fetchall()
    return [ChannelHit(id=r[0], score=float(r[1])) for r in rows]


def _stated_condition(ci: ChannelInput, words: list[str]) -> tuple[str, dict[str, Any]]:
    if not words:
        return "false", {}
    if encryption_enabled():
        from governance.crypto.fields import words_hashes

        hashes = words_hashes(agent_id=ci.agent_id, words=words)
        if not hashes:
            return "false", {}
        return "e.keyword_hashes && %(t_hashes)s::bigint[]", {"t_hashes": hashes}
    return "e.search_vector @@ to_tsquery('english', %(t_words)s)", {"t_words": " | ".join(words)}


def names_a_time(text: str) -> bool:
    """Whether the text names a time at all (no query: "now" and the events are not read)."""
    probe = datetime(2000, 1, 1, tzinfo=UTC)
    return named_time(text, probe, event_date=lambda words: probe) is not None


def question_span(ci: ChannelInput) -> TimeSpan | None:
    """The interval the question names (computed once per search, shared in `memo`)."""
    if "time_span" in ci.memo:
        span: TimeSpan | None = ci.memo["time_span"]
        return span
    span = None
    # Whether the question names a time at all, before reading "now" from the scope (a query).
    if not names_a_time(ci.analysis.text):
        ci.memo["time_span"] = None
        return None
    anchor = ci.anchor or ci.scope.as_of or scope_anchor(ci.scope)
    if anchor is not None:
        span = named_time(ci.analysis.text, anchor, zone_of(ci.time_zone), event_date=EventDate(ci.scope))
    ci.memo["time_span"] = span
    return span


def time_turns(ci: ChannelInput) -> list[ChannelHit]:
    """The channel (see the module's doc)."""
    span = question_span(ci)
    if span is not None:
        stated: list[str] = []
        if span.precision == YEAR:
            stated = [str(span.start.year)]
        elif span.precision in (MONTH, DAY, WEEK) and span.start.month != 5:
            stated = [calendar.month_name[span.start.month].lower()]
        condition, params = _stated_condition(ci, stated)
        within = "(e.created_at >= %(t_start)s AND e.created_at < %(t_end)s)"
        return _ranked(ci, f"{within} OR {condition}", {**params, "t_start": span.start, "t_end": span.end})
    if asks_for_time(ci.analysis.text):
        condition, params = _stated_condition(ci, list(TIME_WORDS))
        return _ranked(ci, condition, params)
    return []


register(
    Channel(
        name="time",
        kind=ENTRY,
        run=time_turns,
        weights={KIND_TEMPORAL: 1.0},
        default_weight=0.6,
        uses_vector=True,
        # A question that neither names nor asks for a time gives the channel nothing: not run.
        applies=lambda ci: names_a_time(ci.analysis.text) or asks_for_time(ci.analysis.text),
    )
)
