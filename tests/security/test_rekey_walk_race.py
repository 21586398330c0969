"""The walk of a rotation with new keys (`encryption_rotate --rekey`) against a writer on another
connection: the writer's entity is hashed under the live blind key and the walk rewrites an older
entity of the same name and scope to that same hash.

The writer inserts its entity before the walk looks for collisions but commits only once the walk's
UPDATE of the entities waits on it (seen in `pg_stat_activity`, no sleep): the walk's first look
(`_holders`) cannot see the uncommitted row, so its UPDATE meets the unique name as the writer
commits and fails with a unique violation. The walk must look at its batch again (its savepoint
rolled back, `_COLLISION_TRIES`), fold its entity into the writer's (`collisions_merge_with`:
`entity_merge`), and finish with one entity holding both entities' items."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from governance.crypto.envelope import data_keys_forget, data_keys_retire, data_keys_retired_destroy
from governance.crypto.rotation import encryption_rotate
from memoryapp.items.rules import normalized_name
from memoryapp.items.selectors import items_holding
from memoryapp.items.services import item_write
from memoryapp.models import Agent, Entity, MemoryItem
from tests.kit.api import Caller
from tests.kit.concurrency import started

pytestmark = pytest.mark.django_db(transaction=True)

BOAT = "Ana's boat"
WAIT = 60.0  # seconds a side waits for the other before the test fails (never reached when it works)


def _waiting_on(writer_pid: int, walk_pid: int) -> str | None:
    """The statement the walk runs while it waits on the writer's transaction, else None."""
    with connection.cursor() as cursor:
        # The writer's transaction would otherwise read the activity of its first look all along.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT query FROM pg_stat_activity WHERE pid = %s AND %s = ANY(pg_blocking_pids(pid))",
            [walk_pid, writer_pid],
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def _writer(agent: Agent, walk_pid: int, inserted: threading.Event, seen: list[str]) -> None:
    """Another process: a second entity of the name under the live blind key, with its fact, in one
    transaction held open until the walk's UPDATE of the entities waits on it."""
    with transaction.atomic():
        entity = Entity(
            agent=agent, user_id="u-ana", name=BOAT, normalized_name=normalized_name(BOAT)
        )  # hashed as it saves, under the key this process has now: the live one
        entity.save(force_insert=True)
        MemoryItem.objects.create(
            agent=agent,
            user_id="u-ana",
            kind="fact",
            subject=BOAT,
            attribute="owner",
            value="Ana",
            trust="system",
            status="active",
            entity=entity,
            valid_from=timezone.now(),
            recorded_at=timezone.now(),
            activated_at=timezone.now(),
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            writer_pid = cursor.fetchone()[0]
        inserted.set()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            query = _waiting_on(writer_pid, walk_pid)
            if query is not None:
                seen.append(query)
                return  # the commit: the walk's UPDATE now meets the writer's hash
            time.sleep(0.01)  # a lock wait lasts until the commit: a poll a hundredth apart sees it
        raise AssertionError("the walk never waited on the writer's entity")


def test_a_row_committed_under_the_live_key_while_the_walk_writes_is_folded_on_the_retry(
    encrypted: Any, alice: Caller
) -> None:
    agent = Agent.objects.get(pk=alice.agent.pk)
    older = item_write(
        agent=agent, kind="fact", subject=BOAT, attribute="colour", value="blue", trust="system", user_id="u-ana"
    )  # its entity hashed under the agent's blind key of now, to be retired
    data_keys_retire()
    data_keys_forget()  # this process (the walk's and the writer's) reads the live keys from now on
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        walk_pid = cursor.fetchone()[0]

    inserted = threading.Event()
    seen: list[str] = []
    errors: list[BaseException] = []
    writer = started(lambda: _writer(agent, walk_pid, inserted, seen), errors, name="writer")
    assert inserted.wait(WAIT), errors  # a writer that failed before inserting says why
    assert Entity.objects.filter(agent=agent).count() == 1  # the writer's is not committed yet
    result = encryption_rotate(settle=0, batch=500)
    writer.join(WAIT)
    assert not errors, errors

    # The walk waited in its UPDATE of the entities: the unique violation was the retry's to fold.
    assert len(seen) == 1 and seen[0].startswith('UPDATE "memoryapp_entity"'), seen
    assert result["rows_merged"] == {"memoryapp_entity": 1}
    data_keys_retired_destroy()
    data_keys_forget()
    # One entity of the name, the writer's, holding both facts; nothing lost, both found by their slot.
    kept = Entity.objects.get(agent=agent)
    assert kept.pk != older.entity_id and kept.name == BOAT
    assert set(MemoryItem.objects.filter(agent=agent).values_list("entity_id", flat=True)) == {kept.pk}
    held = items_holding(agent=agent, user_id="u-ana", known_at=timezone.now())
    assert sorted((i.attribute, i.value) for i in held) == [("colour", "blue"), ("owner", "Ana")]
    again = item_write(
        agent=agent, kind="fact", subject=BOAT, attribute="colour", value="blue", trust="system", user_id="u-ana"
    )
    assert again.pk == older.pk and again.entity_id == kept.pk  # the repeat merges: the slot is one
