"""The settings sent in one round trip with a statement (the vector read's HNSW settings, the access
log's synchronous_commit) hold for that statement and end with it: on a persistent connection
(CONN_MAX_AGE) outside a transaction they must not leak to the next request's queries."""

from __future__ import annotations

import pytest
from django.db import connection

from memoryapp.search.access_log import access_log_record
from memoryapp.search.vector import _tuned_rows
from tests.kit.api import Caller
from tests.kit.factories import MemoryItemFactory, ThreadFactory


def _show(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_the_hnsw_settings_apply_to_the_read_and_end_with_it() -> None:
    assert not connection.in_atomic_block
    with connection.cursor() as cursor:
        # pgvector's settings exist in a session once its library is loaded (by any use of the
        # type); on a new connection SHOW would not know them yet.
        cursor.execute("SELECT '[1]'::vector")
    before = (_show("hnsw.ef_search"), _show("hnsw.iterative_scan"))
    with connection.cursor() as cursor:
        rows = _tuned_rows(
            cursor,
            "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan'), %(x)s::int",
            {"x": 7},
            limit=300,
        )
    assert rows == [("600", "relaxed_order", 7)]
    assert (_show("hnsw.ef_search"), _show("hnsw.iterative_scan")) == before == ("40", "off")


@pytest.mark.django_db(transaction=True)
def test_the_access_log_setting_ends_with_its_statement(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=[("user", "We are planning a trip to Porto.")])
    item = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    assert _show("synchronous_commit") == "on"
    assert access_log_record(agent_id=alice.agent.pk, thread=thread, source="search", item_ids=[item.id])
    assert _show("synchronous_commit") == "on"
