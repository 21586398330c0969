"""Time words of an extracted item, resolved from the message that said them (004 `resolveTime`).

`resolve_time("yesterday", said_at, zone)` is the start of the day before the message, in the
thread's time zone. Understood: ISO dates and date-times; today / tonight / now, yesterday,
tomorrow, the day before yesterday / after tomorrow; "N days|weeks|months|years ago" and
"in N ..."; "last|next|this <weekday>" and a bare weekday (the latest one not after the message);
"last|next|this week|month|year". Anything else is None (the item holds from the message's time).
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.relativedelta import relativedelta

from memoryapp.errors import DomainError

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
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
}
_UNITS = {"day": "days", "week": "weeks", "month": "months", "year": "years"}
_AGO = re.compile(r"^(?P<n>\d+|[a-z]+)\s+(?P<unit>day|week|month|year)s?\s+ago$")
_IN = re.compile(r"^in\s+(?P<n>\d+|[a-z]+)\s+(?P<unit>day|week|month|year)s?$")
_RELATIVE = re.compile(r"^(?P<which>last|next|this|on)?\s*(?P<what>[a-z]+)$")


def zone_of(name: object) -> ZoneInfo:
    """The IANA zone of that name, UTC when there is none or it is unknown."""
    if isinstance(name, str) and name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return ZoneInfo("UTC")


# Files of a zone directory that are no IANA zone names (the system's own zone, tzcode's rules).
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def iana_zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - _NOT_ZONES


def zone_check(name: object, *, field: str = "time_zone") -> ZoneInfo:
    """The IANA zone of that name (Europe/Lisbon, UTC, America/New_York ...), or a 400 naming `field`."""
    if not isinstance(name, str) or name not in iana_zone_names():
        raise DomainError(
            "invalid_time_zone",
            f"{field} must be an IANA time zone name, such as Europe/Lisbon or UTC (got {str(name)[:60]!r}).",
            field=field,
        )
    return ZoneInfo(name)


def _start(day: date, zone: ZoneInfo) -> datetime:
    return datetime.combine(day, time.min, tzinfo=zone)


def _number(word: str) -> int | None:
    if word.isdigit():
        return int(word)
    return _NUMBERS.get(word)


def resolve_time(expression: object, said_at: datetime, zone: ZoneInfo) -> datetime | None:
    """The moment an expression names, read from `said_at` in `zone`; None when not understood."""
    if not isinstance(expression, str):
        return None
    text = " ".join(expression.strip().lower().replace(",", " ").split())
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(expression.strip())
    except ValueError:
        parsed = None
    if parsed is not None:
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)
    local = said_at.astimezone(zone)
    today = local.date()
    fixed = {
        "now": local,
        "today": _start(today, zone),
        "tonight": _start(today, zone),
        "yesterday": _start(today - timedelta(days=1), zone),
        "tomorrow": _start(today + timedelta(days=1), zone),
        "the day before yesterday": _start(today - timedelta(days=2), zone),
        "the day after tomorrow": _start(today + timedelta(days=2), zone),
    }
    if text in fixed:
        return fixed[text]
    for pattern, sign in ((_AGO, -1), (_IN, 1)):
        match = pattern.match(text)
        if match:
            n = _number(match.group("n"))
            if n is None:
                return None
            delta = relativedelta(**{_UNITS[match.group("unit")]: sign * n})  # type: ignore[arg-type]
            return _start(today + delta, zone)
    match = _RELATIVE.match(text)
    if not match:
        return None
    which, what = match.group("which") or "", match.group("what")
    if what in WEEKDAYS:
        target = WEEKDAYS.index(what)
        monday = today - timedelta(days=today.weekday())
        if which == "next":
            ahead = (target - today.weekday()) % 7 or 7
            return _start(today + timedelta(days=ahead), zone)
        if which == "this":
            return _start(monday + timedelta(days=target), zone)
        back = (today.weekday() - target) % 7
        if which == "last":
            back = back or 7
        return _start(today - timedelta(days=back), zone)
    if what in ("week", "month", "year") and which in ("last", "next", "this"):
        step = {"last": -1, "next": 1, "this": 0}[which]
        if what == "week":
            monday = today - timedelta(days=today.weekday())
            return _start(monday + timedelta(weeks=step), zone)
        if what == "month":
            return _start(today.replace(day=1) + relativedelta(months=step), zone)
        return _start(today.replace(month=1, day=1) + relativedelta(years=step), zone)
    return None
