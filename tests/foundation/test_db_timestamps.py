"""Timestamps read by psycopg's own loader (memory_project.postgres, issue 26): the values every read
gives are the stored instants, to the microsecond, before 1970 too, aware in UTC, as Django's loader
gave them; where the two would differ (USE_TZ off, a named cursor) Django's answers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from psycopg.pq import Format

from memoryapp.models import Entry
from memoryapp.threads.services import entries_add
from tests.kit.api import Caller, get_ok
from tests.kit.factories import ThreadFactory

pytestmark = pytest.mark.django_db

TIMES = [
    datetime(1969, 7, 20, 20, 17, 40, 123_456, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    datetime(2024, 2, 29, 23, 59, 59, 1, tzinfo=UTC),
    datetime(2026, 3, 1, 9, 0, tzinfo=UTC),
]
_TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid


def _loader_of(cursor: Any) -> Any:
    """The timestamptz loader a Django cursor reads with."""
    return cursor.cursor.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)


def _written(caller: Caller) -> list[Entry]:
    thread = ThreadFactory(agent=caller.agent, external_id="moon")
    return entries_add(
        thread=thread,
        entries=[{"role": "user", "content": f"turn {n}", "created_at": at} for n, at in enumerate(TIMES)],
    )


def test_every_read_gives_the_stored_instants_to_the_microsecond_aware_in_utc(alice: Caller) -> None:
    written = _written(alice)
    stored = list(
        Entry.objects.filter(pk__in=[e.pk for e in written]).order_by("seq").values_list("created_at", flat=True)
    )
    assert stored == TIMES
    assert all(at.tzinfo is UTC for at in stored)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT created_at FROM memoryapp_entry WHERE id = ANY(%s) ORDER BY seq", [[e.id for e in written]]
        )
        raw = [row[0] for row in cursor.fetchall()]
    assert raw == TIMES and all(at.tzinfo is UTC for at in raw)
    # The agent's reads: a page of the thread's entries (the ORM) and a branch (a raw query).
    for path in ("/api/v1/threads/moon/entries", "/api/v1/threads/moon/path"):
        page = get_ok(alice.client, path)
        assert [e["created_at"] for e in page["results"]] == [at.isoformat() for at in TIMES]
    assert TIMES[0].isoformat() == "1969-07-20T20:17:40.123456+00:00"


def test_the_connection_reads_timestamps_with_psycopgs_loader() -> None:
    with connection.cursor() as cursor:
        assert _loader_of(cursor) is psycopg.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)


def test_with_use_tz_off_times_read_naive_as_django_reads_them(alice: Caller, settings: Any) -> None:
    written = _written(alice)
    settings.USE_TZ = False
    naive = list(
        Entry.objects.filter(pk__in=[e.pk for e in written]).order_by("seq").values_list("created_at", flat=True)
    )
    assert naive == [at.replace(tzinfo=None) for at in TIMES]
    settings.USE_TZ = True
    aware = list(
        Entry.objects.filter(pk__in=[e.pk for e in written]).order_by("seq").values_list("created_at", flat=True)
    )
    assert aware == TIMES and all(at.tzinfo is UTC for at in aware)
    with connection.cursor() as cursor:
        assert _loader_of(cursor) is psycopg.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)


def test_a_named_cursor_reads_the_same_times_and_the_next_cursor_psycopgs_again(alice: Caller) -> None:
    written = _written(alice)
    with transaction.atomic():
        # A server-side cursor (Django's own, with its loader), a query on another cursor inside it.
        read = []
        for entry in Entry.objects.filter(pk__in=[e.pk for e in written]).order_by("seq").iterator(chunk_size=1):
            read.append(entry.created_at)
            assert Entry.objects.filter(pk=entry.pk).values_list("created_at", flat=True).get() == entry.created_at
    assert read == TIMES and all(at.tzinfo is UTC for at in read)
    with connection.cursor() as cursor:
        assert _loader_of(cursor) is psycopg.adapters.get_loader(_TIMESTAMPTZ, Format.TEXT)
