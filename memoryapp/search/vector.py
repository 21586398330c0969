"""The vector channel: pgvector cosine distance over the HNSW indexes.

The scope filter is applied inside the same query as the distance order. HNSW alone would take
its `ef_search` nearest rows of the whole table and filter afterwards, returning too few rows
for a small scope; pgvector 0.8's iterative scan keeps reading the graph until enough rows pass
the filter (relaxed order: results are re-sorted here).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from pgvector.django import CosineDistance

from memoryapp.models import MemoryItem
from memoryapp.search.keyword import ChannelHit, entry_scope_sizes
from memoryapp.search.scope import EntryScope
from memoryapp.search.space import QUANTIZED_COLUMN, QUANTIZED_MODELS, configured_space, thread_vectors_indexed

# A scope of at most this many embedded entries is read exactly when the HNSW walk came back short.
EXACT_SCAN_MAX = 50_000
# From this many entries in the scope (agent, person or thread), the turns meeting a channel's
# condition (time, entity) are read by the HNSW walk with the condition as its filter rather than
# each compared: a "when" question's condition (any word stating a time) holds for many turns, each
# a heap read of its vector (issue 26: ~500 ms in a 70,000-entry scope). A smaller scope (a LoCoMo
# conversation's ~600 turns) is read exactly, as before.
WALK_FROM_SCOPE = 5_000
# The HNSW index holds the whole table (every agent's entries): a walk filtered to a scope of S rows
# among T passes some limit x T / S rows before `limit` of them are the scope's, each a visit of the
# graph (a node and its neighbours' vectors), while an exact read compares the scope's S rows once
# each. A scope of at most EXACT_SCAN_MAX rows is read exactly when S x S <= WALK_EXACT_RATIO x limit
# x T: a thread's search then costs what its own rows cost, however large the rest of the table grows.
# Measured (issue 26, bench/context_build.py, a 10,000-entry thread, 30 nearest): the walk 16 ms in
# 60,000 entries and 320 ms in 600,000 (~90 and ~180 us per row of limit x T / S), the exact read
# 25 ms in both (2.5 us a row of the thread): the ratio of the two costs, 36 to 71.
WALK_EXACT_RATIO = 40
# With the thread's vectors in an index of their own (memoryapp.search.space.THREAD_VECTORS_INDEX),
# the exact read of a thread is an index-only scan: in PostgreSQL CPU, 0.8 us a row against the
# heap's 1.4 us, the walk 53 to 65 us a row of limit x T / S (10,000-entry thread, 60,000 entries).
WALK_INDEXED_EXACT_RATIO = 80
# A scope read exactly gives up to this many of its nearest rows (the vector channel's own `limit`
# first) to the channels of the same search that rank the scope's rows meeting a condition by the
# same vector (time, entity, speaker: `nearest_matching`): when `limit` of them meet it, those are
# that channel's rows, and the scope is not compared again (issue 26: a "when" question's condition
# holds for most of a thread, and its exact read compared them all, each a heap read of its vector).
NEAREST_KEPT = 120
_NEAREST_MEMO = "vector.nearest"
# A scope read exactly is read by its rows' sign bits first (memoryapp.search.space.QUANTIZED_COLUMN,
# migration 0063): the CANDIDATES_PER_ROW x n rows (at least CANDIDATES_MIN) nearest by Hamming
# distance, then those by their full vectors, the n nearest kept (n = the rows asked for). Measured
# (issue 26) on LoCoMo's 2,760 turns and LongMemEval turns, 10,000 in one thread, all-MiniLM-L6-v2-q8,
# LoCoMo's 999 questions: see docs/recall-and-context.md. A scope of at most that many rows is
# compared whole, as is any row without bits yet (embedded before the migration). Only for the
# models whose bits were measured so (QUANTIZED_MODELS): another model's vectors are compared whole.
# QUANTIZED_READ True or False overrides that (the bench measures both ways in one run).
QUANTIZED_READ: bool | None = None
CANDIDATES_PER_ROW = 4
CANDIDATES_MIN = 400
# An entry's cosine distance to the question, as the HNSW index orders by it (the walk) and as no
# index does (`+ 0`: the exact read, every row of the scope compared).
_WALKED = "e.embedding <=> %(v)s::vector"
_EXACT = "(e.embedding <=> %(v)s::vector) + 0"


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


def vector_entries(
    *, scope: EntryScope, vector: list[float], limit: int, memo: dict[str, Any] | None = None
) -> list[ChannelHit]:
    """The scope's `limit` nearest entries. The HNSW walk gives up after hnsw.max_scan_tuples rows:
    for a small scope in a large table (a thread among millions of entries) it may stop with fewer
    rows than the scope holds; then a scope of at most EXACT_SCAN_MAX rows is read exactly. A scope
    read exactly leaves its NEAREST_KEPT nearest rows in the search's `memo` (`nearest_matching`)."""
    where, params = scope.where("e")
    params = {**params, "v": vector_literal(vector), "n": limit, "cap": EXACT_SCAN_MAX + 1}
    # The distance is computed once a row: the order is that of the column (`_EXACT` is no order the
    # index gives, so every row of the scope is compared; `_WALKED` is the HNSW index's).
    nearest = f"""
        SELECT e.id, {{distance}} AS distance
          FROM memoryapp_entry e
         WHERE {where} AND e.embedding IS NOT NULL
         ORDER BY distance
         LIMIT %(n)s
    """
    if read_exactly(scope, limit):
        reach = max(limit, NEAREST_KEPT) if memo is not None else limit
        candidates = max(CANDIDATES_MIN, CANDIDATES_PER_ROW * reach)
        read = nearest.format(distance=_EXACT)
        if quantized_read() and entry_scope_sizes(scope)[0] > candidates:
            read = _quantized_nearest(scope)
        with connection.cursor() as cursor:
            cursor.execute(read, {**params, "n": reach, "m": candidates})
            rows = cursor.fetchall()
        exact = sorted((ChannelHit(id=r[0], score=1.0 - float(r[1])) for r in rows), key=lambda h: -h.score)
        if memo is not None:
            memo[_NEAREST_MEMO] = (scope, params["v"], reach, exact)
        return exact[:limit]
    with connection.cursor() as cursor:
        rows = _tuned_rows(cursor, nearest.format(distance=_WALKED), params, limit)
        if len(rows) < limit:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM memoryapp_entry e WHERE {where} AND e.embedding IS NOT NULL"
                " LIMIT %(cap)s) AS s",
                params,
            )
            held = cursor.fetchone()[0]
            if len(rows) < held <= EXACT_SCAN_MAX:
                cursor.execute(nearest.format(distance=_EXACT), params)
                rows = cursor.fetchall()
    hits = [ChannelHit(id=r[0], score=1.0 - float(r[1])) for r in rows]
    hits.sort(key=lambda h: -h.score)
    return hits


def quantized_read() -> bool:
    """Whether a scope read exactly is read by its bits first (see QUANTIZED_READ)."""
    if QUANTIZED_READ is not None:
        return QUANTIZED_READ
    return configured_space() in QUANTIZED_MODELS


def _quantized_nearest(scope: EntryScope) -> str:
    """The scope's `n` nearest rows by the full vector among its `m` nearest by the sign bits (an
    index-only scan of the thread's bits, THREAD_BITS_INDEX, then `m` rows fetched by id), and its
    rows without bits compared whole (none once `vectors_quantize` has run: BITS_PENDING_INDEX)."""
    where, _ = scope.where("e")
    near_where, _ = scope.where("q")
    return f"""
        SELECT e.id, (e.embedding <=> %(v)s::vector) AS distance
          FROM (SELECT q.id FROM memoryapp_entry q
                 WHERE {near_where} AND q.{QUANTIZED_COLUMN} IS NOT NULL
                 ORDER BY q.{QUANTIZED_COLUMN} <~> binary_quantize(%(v)s::vector)::bit varying
                 LIMIT %(m)s) AS c
          JOIN memoryapp_entry e ON e.id = c.id
        UNION ALL
        SELECT e.id, (e.embedding <=> %(v)s::vector) + 0
          FROM memoryapp_entry e
         WHERE {where} AND e.embedding IS NOT NULL AND e.{QUANTIZED_COLUMN} IS NULL
         ORDER BY distance
         LIMIT %(n)s
    """


def read_exactly(scope: EntryScope, limit: int) -> bool:
    """Whether the scope's nearest rows are read exactly rather than by the HNSW walk (see
    WALK_EXACT_RATIO): a small scope in a large table. The sizes are the keyword channel's (cached a
    minute); a table never analysed is walked."""
    if scope.thread_pk is None and scope.user_id is None:
        return False  # the agent's whole scope: the walk (the agent is most of what it passes)
    size, table = entry_scope_sizes(scope)
    ratio = WALK_EXACT_RATIO
    if scope.thread_pk is not None and thread_vectors_indexed(settings.EMBEDDING_DIMENSIONS):
        ratio = WALK_INDEXED_EXACT_RATIO
    return 0 < size <= EXACT_SCAN_MAX and table > 0 and size * size <= ratio * limit * table


def nearest_matching(
    *,
    scope: EntryScope,
    condition: str,
    params: dict[str, Any],
    vector: list[float],
    limit: int,
    walk: bool,
    memo: dict[str, Any] | None = None,
) -> list[ChannelHit]:
    """The scope's entries meeting `condition` (SQL over `memoryapp_entry e`), nearest the vector
    first (the time and entity turn channels). Read exactly (every matching row compared), unless
    `walk`: then by the HNSW walk with the condition as its filter, and exactly when the walk comes
    back with fewer than `limit` rows. The callers walk only in a large scope, where comparing
    every matching row (each a heap read of its vector) costs far more than the walk.

    When the search's vector channel read this scope exactly by the same vector (its nearest rows in
    `memo`), the rows of those meeting the condition are the answer if there are `limit` of them (a
    row meeting it nearer than the last of them would be among the nearest) or if the nearest rows
    are the whole scope: one look-up of those rows by id instead of the scope's read."""
    literal = vector_literal(vector)
    kept = (memo or {}).get(_NEAREST_MEMO)
    if not walk and kept is not None and kept[0] == scope and kept[1] == literal:
        found = _kept_matching(scope=scope, condition=condition, params=params, reach=kept[2], kept=kept[3])
        if found is not None and (len(found) >= limit or len(kept[3]) < kept[2]):
            return found[:limit]
    where, scope_params = scope.where("e")
    params = {**scope_params, **params, "v": literal, "n": limit}
    sql = (
        f"SELECT e.id, {{distance}} AS distance FROM memoryapp_entry e"
        f" WHERE {where} AND e.embedding IS NOT NULL AND ({condition}) ORDER BY distance LIMIT %(n)s"
    )
    rows: list[Any] = []
    with connection.cursor() as cursor:
        if walk:
            rows = _tuned_rows(cursor, sql.format(distance=_WALKED), params, limit)
        if len(rows) < limit:
            cursor.execute(sql.format(distance=_EXACT), params)
            rows = cursor.fetchall()
    hits = [ChannelHit(id=r[0], score=1.0 - float(r[1])) for r in rows]
    hits.sort(key=lambda h: -h.score)
    return hits


def _kept_matching(
    *, scope: EntryScope, condition: str, params: dict[str, Any], reach: int, kept: list[ChannelHit]
) -> list[ChannelHit] | None:
    """Of the scope's nearest rows `kept` (best first), those meeting `condition`, in that order."""
    if not kept:
        return []
    where, scope_params = scope.where("e")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id FROM memoryapp_entry e WHERE e.id = ANY(%(kept_ids)s) AND {where} AND ({condition})",
            {**scope_params, **params, "kept_ids": [h.id for h in kept]},
        )
        meeting = {r[0] for r in cursor.fetchall()}
    return [ChannelHit(id=h.id, score=h.score) for h in kept if h.id in meeting]


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
