"""The vector channel: pgvector cosine distance over the HNSW indexes.

The scope filter is applied inside the same query as the distance order. HNSW alone would take
its `ef_search` nearest rows of the whole table and filter afterwards, returning too few rows
for a small scope; pgvector 0.8's iterative scan keeps reading the graph until enough rows pass
the filter (relaxed order: results are re-sorted here).
"""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import QuerySet
from pgvector.django import CosineDistance

from memoryapp.models import MemoryItem
from memoryapp.search.keyword import ChannelHit
from memoryapp.search.scope import EntryScope

# A scope of at most this many embedded entries is read exactly when the HNSW walk came back short.
EXACT_SCAN_MAX = 50_000


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


def _tune_hnsw(cursor: object, limit: int) -> None:
    # SET LOCAL lasts until the end of the surrounding transaction (the atomic block below); both in
    # one round trip (statements without parameters go as one simple query).
    cursor.execute(  # type: ignore[attr-defined]
        f"SET LOCAL hnsw.ef_search = {max(40, min(1000, limit * 2))}; SET LOCAL hnsw.iterative_scan = relaxed_order"
    )


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
    with transaction.atomic(), connection.cursor() as cursor:
        _tune_hnsw(cursor, limit)
        cursor.execute(nearest.format(order="distance"), params)
        rows = cursor.fetchall()
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
