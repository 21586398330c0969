"""The vector channel: pgvector cosine distance over the HNSW indexes.

The scope filter is applied inside the same query as the distance order. HNSW alone would take
its `ef_search` nearest rows of the whole table and filter afterwards, returning too few rows
for a small scope; pgvector 0.8's iterative scan keeps reading the graph until enough rows pass
the filter (relaxed order: results are re-sorted here).
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from pgvector.django import CosineDistance

from memoryapp.models import MemoryItem
from memoryapp.search.keyword import ChannelHit
from memoryapp.search.scope import EntryScope

# A scope of at most this many embedded entries is read exactly when the HNSW walk came back short.
EXACT_SCAN_MAX = 50_000
# From this many entries in the scope (agent, person or thread), the turns meeting a channel's
# condition (time, entity) are read by the HNSW walk with the condition as its filter rather than
# each compared: a "when" question's condition (any word stating a time) holds for many turns, each
# a heap read of its vector (issue 26: ~500 ms in a 70,000-entry scope). A smaller scope (a LoCoMo
# conversation's ~600 turns) is read exactly, as before.
WALK_FROM_SCOPE = 5_000


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def _tune_hnsw(cursor: object, limit: int) -> None:
    # SET LOCAL lasts until the end of the surrounding transaction (the atomic block below); both in
    # one round trip (statements without parameters go as one simple query).
    cursor.execute(_hnsw_settings(limit))  # type: ignore[attr-defined]


def _hnsw_settings(limit: int) -> str:
    return f"SET LOCAL hnsw.ef_search = {max(40, min(1000, limit * 2))}; SET LOCAL hnsw.iterative_scan = relaxed_order;"


def _tuned_rows(cursor: Any, sql: str, params: dict[str, Any], limit: int) -> list[Any]:
    """The rows of `sql` read with the HNSW settings in one round trip: the SET LOCALs and the query
    go as one statement string (Django's client-side binding sends it as one simple query, which
    PostgreSQL runs as one transaction, so the settings hold for the query and end with it; inside a
    caller's transaction they last until its end, as a SET LOCAL does)."""
    cursor.execute(f"{_hnsw_settings(limit)} {sql}", params)
    while cursor.description is None and cursor.nextset():
        pass  # the SETs' results
    return list(cursor.fetchall())


def vector_entries(*, scope: EntryScope, vector: list[float], limit: int) -> list[ChannelHit]:
    """The scope's `limit` nearest entries. The HNSW walk gives up after hnsw.max_scan_tuples rows:
    for a small scope in a large table (a thread among millions of entries) it may stop with fewer
    rows than the scope holds; then a scope of at most EXACT_SCAN_MAX rows is read exactly."""
    where, params = scope.where("e")
    params = {**params, "v": vector_literal(vector), "n": limit, "cap": EXACT_SCAN_MAX + 1}
    nearest = f"""
        SELECT e.id, e.embedding <=> %(v)s::vector AS distance
          FROM memoryapp_entry e
         WHERE {where} AND e.embedding IS NOT NULL
         ORDER BY {{order}}
         LIMIT %(n)s
    """
    with connection.cursor() as cursor:
        rows = _tuned_rows(cursor, nearest.format(order="distance"), params, limit)
        if len(rows) < limit:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM memoryapp_entry e WHERE {where} AND e.embedding IS NOT NULL"
                " LIMIT %(cap)s) AS s",
                params,
            )
            held = cursor.fetchone()[0]
            if len(rows) < held <= EXACT_SCAN_MAX:
                # `(distance) + 0` is no order the index gives: every row of the scope is compared.
                cursor.execute(nearest.format(order="(e.embedding <=> %(v)s::vector) + 0"), params)
                rows = cursor.fetchall()
    hits = [ChannelHit(id=r[0], score=1.0 - float(r[1])) for r in rows]
    hits.sort(key=lambda h: -h.score)
    return hits


def nearest_matching(
    *, scope: EntryScope, condition: str, params: dict[str, Any], vector: list[float], limit: int, walk: bool
) -> list[ChannelHit]:
    """The scope's entries meeting `condition` (SQL over `memoryapp_entry e`), nearest the vector
    first (the time and entity turn channels). Read exactly (every matching row compared), unless
    `walk`: then by the HNSW walk with the condition as its filter, and exactly when the walk comes
    back with fewer than `limit` rows. The callers walk only in a large scope, where comparing
    every matching row (each a heap read of its vector) costs far more than the walk."""
    where, scope_params = scope.where("e")
    params = {**scope_params, **params, "v": vector_literal(vector), "n": limit}
    sql = (
        f"SELECT e.id, 1 - (e.embedding <=> %(v)s::vector) FROM memoryapp_entry e"
        f" WHERE {where} AND e.embedding IS NOT NULL AND ({condition}) ORDER BY {{order}} LIMIT %(n)s"
    )
    rows: list[Any] = []
    with connection.cursor() as cursor:
        if walk:
            rows = _tuned_rows(cursor, sql.format(order="e.embedding <=> %(v)s::vector"), params, limit)
        if len(rows) < limit:
            cursor.execute(sql.format(order="(e.embedding <=> %(v)s::vector) + 0"), params)
            rows = cursor.fetchall()
    hits = [ChannelHit(id=r[0], score=float(r[1])) for r in rows]
    hits.sort(key=lambda h: -h.score)
    return hits


def vector_items(*, items: QuerySet[MemoryItem], vector: list[float], limit: int) -> list[ChannelHit]:
    with transaction.atomic(), connection.cursor() as cursor:
        _tune_hnsw(cursor, limit)
        rows = list(
            items.filter(embedding__isnull=False)
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")
            .values_list("id", "distance")[:limit]
        )
    hits = [ChannelHit(id=str(r[0]), score=1.0 - float(r[1])) for r in rows]
    hits.sort(key=lambda h: -h.score)
    return hits
