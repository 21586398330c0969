"""The slots of many items are locked in one statement (an erasure's dry run on the confirm step
purges the items of others that quoted the person: one lock statement an item made that page ask a
query per row), holding the same keys `slot_lock` takes for each."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from governance import locks
from memoryapp.items.services import slots_lock
from memoryapp.models import MemoryItem
from tests.kit.factories import AgentFactory

pytestmark = pytest.mark.django_db


def _held_advisory_keys() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (classid::bigint << 32) | objid::bigint FROM pg_locks"
            " WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 1"
        )
        return {row[0] for row in cursor.fetchall()}


def test_the_slots_of_40_items_are_locked_in_one_query_with_each_slots_own_key() -> None:
    agent = AgentFactory(slug="concierge")
    items = [
        MemoryItem(agent=agent, user_id=f"u-{i % 4}", kind="fact", subject="Hotel", attribute=f"rooms {i}", value="x")
        for i in range(40)
    ]
    wanted = {locks.item_slot(str(agent.pk), i.user_id, "", "", "hotel", i.attribute) for i in items}
    with transaction.atomic():
        with CaptureQueriesContext(connection) as asked:
            slots_lock(items=items)
        held = _held_advisory_keys()
    assert len(asked) == 1
    assert wanted <= held, len(wanted - held)
