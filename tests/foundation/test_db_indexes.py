"""The indexes the migrations leave (issue 26): every one is written on every insert of its table, and
on every update that is not HOT, so none may be a copy of another; and every foreign key keeps an
index that leads with its column (a delete of the row it points at, and the joins, read it)."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

OURS = "(c.relname LIKE 'memoryapp\\_%' OR c.relname LIKE 'governance\\_%')"

# B-tree indexes with their table, key columns (not INCLUDE ones), operator classes and orders,
# unique or not, partial or not.
INDEXES_SQL = f"""
SELECT c.relname, ic.relname, (i.indkey::int2[])[0:i.indnkeyatts - 1], i.indclass::oid[], i.indoption::int2[],
       i.indisunique,
       i.indpred IS NOT NULL
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_am am ON am.oid = ic.relam
 WHERE am.amname = 'btree' AND i.indisvalid AND {OURS}
"""


def _indexes() -> list[tuple[str, str, list[int], list[int], list[int], bool, bool]]:
    with connection.cursor() as cursor:
        cursor.execute(INDEXES_SQL)
        return [(t, n, list(k), list(o), list(s), u, p) for t, n, k, o, s, u, p in cursor.fetchall()]


def test_no_index_is_a_copy_or_a_prefix_of_another() -> None:
    """A non-unique, non-partial index whose columns (with their operator classes and orders) begin
    another index of the same table serves nothing the longer one does not."""
    indexes = _indexes()
    redundant = []
    for table, name, keys, classes, orders, unique, partial in indexes:
        if unique or partial:
            continue
        width = len(keys)
        for other_table, other, other_keys, other_classes, other_orders, _, other_partial in indexes:
            if other_table != table or other == name or other_partial:
                continue
            prefix = (other_keys[:width], other_classes[:width], other_orders[:width])
            if prefix == (keys, classes, orders):
                redundant.append(f"{table}.{name} (served by {other})")
                break
    assert redundant == []


def test_no_index_is_kept_for_like_prefix_matches_on_ids() -> None:
    """Django adds a `varchar_pattern_ops` copy (`<index>_like`) of every indexed character column,
    which serves only `LIKE 'prefix%'`: no query matches ids, slugs or keys by prefix (migration
    0060). An index made for prefix matches is named for its use (`item_namespace_idx`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ic.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid"
            " JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_opclass oc ON oc.oid = ANY(i.indclass::oid[])"
            f" WHERE oc.opcname IN ('varchar_pattern_ops', 'text_pattern_ops') AND ic.relname LIKE '%\\_like' AND {OURS}"
        )
        names = [name for (name,) in cursor.fetchall()]
        assert names == [], names


# Foreign keys left without an index on purpose, with why.
UNINDEXED = {
    # The ledger's busiest table: a run's events go with their thread (run_event_thread_idx) before
    # their agent's delete could reach them, and an agent is deleted once.
    ("memoryapp_runevent", "agent_id"),
}


def test_every_foreign_key_keeps_an_index_that_leads_with_its_column() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.attname FROM pg_constraint k"
            " JOIN pg_class c ON c.oid = k.conrelid"
            " JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]"
            f" WHERE k.contype = 'f' AND {OURS} AND NOT EXISTS ("
            "   SELECT 1 FROM pg_index i WHERE i.indrelid = k.conrelid AND i.indisvalid AND i.indpred IS NULL"
            "   AND i.indkey[0] = k.conkey[1])"
        )
        uncovered = set(cursor.fetchall()) - UNINDEXED
        assert uncovered == set(), uncovered
