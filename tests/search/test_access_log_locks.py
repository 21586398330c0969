"""The access log's item count against writers of the same items, on two real connections: the
log's statement never holds an item while it waits for another lock, so it is never one end of a
deadlock, and neither its log row nor the writer's change is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from memoryapp.models import AccessLog, MemoryItem, Thread
from memoryapp.search.access_log import access_log_record
from tests.kit.api import Caller
from tests.kit.concurrency import in_threads
from tests.kit.factories import MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_for_a_blocked_backend(timeout: float = 20.0) -> None:
    """Until another connection of this database waits on a lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the access log's statement never waited on the writer")


def _writer_logger_coordinator(
    first_lock: Callable[[], None], then: Callable[[], None], log: Callable[[], bool]
) -> list[Any]:
    """A writer takes `first_lock` and holds it; the log is written meanwhile; once the log waits on
    the writer, the writer goes on with `then` (which the old statement held: a deadlock) and commits."""
    locked, go_on = threading.Event(), threading.Event()

    def writer() -> str:
        with transaction.atomic():
            first_lock()
            locked.set()
            go_on.wait(timeout=30)
            then()
        return "committed"

    def logger() -> bool:
        locked.wait(timeout=30)
        return log()

    def coordinator() -> None:
        locked.wait(timeout=30)
        _wait_for_a_blocked_backend()
        go_on.set()

    return in_threads(writer, logger, coordinator)


def test_a_writer_holding_the_later_item_then_writing_the_earlier_loses_nothing(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent)
    first, second = sorted(
        [
            MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto"),
            MemoryItemFactory(agent=alice.agent, attribute="diet", value="eats no meat"),
        ],
        key=lambda item: item.pk,
    )

    outcomes = _writer_logger_coordinator(
        lambda: MemoryItem.objects.filter(pk=second.pk).update(value="eats no fish"),
        lambda: MemoryItem.objects.filter(pk=first.pk).update(value="lives in Lisbon"),
        lambda: access_log_record(
            agent_id=alice.agent.pk, thread=thread, source="context", item_ids=[first.id, second.id]
        ),
    )

    assert outcomes[:2] == ["committed", True], outcomes
    row = AccessLog.objects.get()
    assert row.item_ids == [first.id, second.id]
    counted = dict(MemoryItem.objects.filter(pk__in=[first.pk, second.pk]).values_list("value", "times_retrieved"))
    assert counted == {"lives in Lisbon": 1, "eats no fish": 1}


def test_an_extraction_holding_the_thread_then_writing_an_item_loses_nothing(alice: Caller) -> None:
    """An extraction locks its thread FOR UPDATE, then writes items; the log's row needs a key lock
    on that thread (its foreign key), which it must take before it holds an item."""
    thread = ThreadFactory(agent=alice.agent)
    item = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")

    outcomes = _writer_logger_coordinator(
        lambda: Thread.objects.select_for_update().filter(pk=thread.pk).first(),
        lambda: MemoryItem.objects.filter(pk=item.pk).update(value="lives in Lisbon"),
        lambda: access_log_record(agent_id=alice.agent.pk, thread=thread, source="context", item_ids=[item.id]),
    )

    assert outcomes[:2] == ["committed", True], outcomes
    assert AccessLog.objects.get().item_ids == [item.id]
    item.refresh_from_db()
    assert (item.value, item.times_retrieved) == ("lives in Lisbon", 1)


def test_requests_counting_the_same_items_at_once_count_each_once(alice: Caller) -> None:
    items = [MemoryItemFactory(agent=alice.agent, attribute=f"a{n}", value=f"value {n}") for n in range(6)]
    ids = [i.id for i in items]

    def log(order: list[str]) -> Callable[[], bool]:
        return lambda: all(
            access_log_record(agent_id=alice.agent.pk, thread=None, source="search", item_ids=order) for _ in range(10)
        )

    outcomes = in_threads(log(ids), log(ids[::-1]), log(ids[2:] + ids[:2]), log(ids))
    assert outcomes == [True] * 4
    assert AccessLog.objects.count() == 40
    assert set(MemoryItem.objects.filter(pk__in=ids).values_list("times_retrieved", flat=True)) == {40}
