"""The keyword channel: Postgres full-text search over the GIN-indexed `search_vector`.

Ranking follows 002's `Storage.search` (the share of the query's words a row holds), with each
word weighted by how rare it is in the scope (as BM25 does) and a mild preference for short
rows, ties newest first:

1. Analyse the text: meaningful words only (question and stop words left out).
2. One SQL query finds the rows of the scope that hold ANY of the words (an OR tsquery, GIN),
   keeps the best KEYWORD_CANDIDATES by Postgres' cover density rank, and reports for each row
   which words it holds and how many lexemes it has.
3. Each word's document frequency is counted over those rows; the scope's size (cached for a
   minute) gives its IDF.
4. Score = sum of the IDF of the words held, each damped by the row's length (BM25 with binary
   term frequency), divided by the sum of all the words' IDF: 1.0 means every word, rare ones
   included, in a short row.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from django.db import connection
from django.db.models import BooleanField, IntegerField, QuerySet
from django.db.models.expressions import RawSQL

from governance.crypto.blind import term_hash
from governance.crypto.envelope import blind_keys
from governance.crypto.keyring import encryption_enabled
from memoryapp.models import MemoryItem
from memoryapp.search.query import QueryAnalysis, tsquery_terms
from memoryapp.search.scope import EntryScope

KEYWORD_CANDIDATES = 1000
# From this many rows in scope, a query first reads the rows holding all (then two) of its words.
LARGE_SCOPE = 5_000
# Up to this many rows in scope, the first two tiers are read in one query (see keyword_entries).
# Measured: it pays in a 10,000-row thread (keyword read p50 17 -> 13 ms), not in a 60,000-row
# agent scope (20 -> 32 ms), where the all-words tier alone usually finds enough rows.
MERGED_TIERS_MAX_SCOPE = 20_000
MAX_TERMS = 16
BM25_K1 = 1.2
BM25_B = 0.5


@dataclass
class ChannelHit:
    id: str
    score: float
    created_order: float = 0.0  # larger is newer: the tie-break


_size_cache: dict[tuple[Any, ...], tuple[float, int]] = {}
_size_lock = threading.Lock()
_SIZE_TTL = 60.0


def _scope_size(key: tuple[Any, ...], count: Any) -> int:
    now = time.monotonic()
    with _size_lock:
        cached = _size_cache.get(key)
        if cached and now - cached[0] < _SIZE_TTL:
            return cached[1]
    size = int(count())
    with _size_lock:
        if len(_size_cache) > 10_000:  # bounded: scopes come and go
            _size_cache.clear()
        _size_cache[key] = (now, size)
    return size


def _bm25(rows: list[tuple[str, int, int, float]], *, terms: int, total: int, limit: int) -> list[ChannelHit]:
    """Rows are (id, the words it holds as bits: word i is bit i, lexeme count, newness); see the
    module's steps 3 and 4."""
    return _bm25_ranked(rows, terms=terms, total=total, limit=limit)[0]


def _bm25_ranked(
    rows: list[tuple[str, int, int, float]], *, terms: int, total: int, limit: int
) -> tuple[list[ChannelHit], bool]:
    """`_bm25`'s hits, and whether the order the rows were read in chose among them: two rows of the
    same score and newness within the first `limit` or at its edge. Rows of the same words and
    length score the same: each such score is computed once (a read finds hundreds of rows and few
    kinds of them; issue 26)."""
    if not rows:
        return [], False
    df = [0] * terms
    for mask, count in Counter(r[1] for r in rows).items():
        for i in range(terms):
            if mask >> i & 1:
                df[i] += count
    total = max(total, len(rows))
    idf = [math.log(1 + (total - d + 0.5) / (d + 0.5)) if d else 0.0 for d in df]
    idf_sum = sum(idf) or 1.0
    avg_len = sum(max(1, r[2]) for r in rows) / len(rows)
    scores: dict[tuple[int, int], float] = {}
    ranked: list[tuple[float, float, int]] = []
    for at, (_, mask, length, newness) in enumerate(rows):
        score = scores.get((mask, length))
        if score is None:
            norm = BM25_K1 * (1 - BM25_B + BM25_B * max(1, length) / avg_len)
            score = scores[(mask, length)] = (
                sum(idf[i] * (BM25_K1 + 1) / (1 + norm) for i in range(terms) if mask >> i & 1) / idf_sum
            )
        ranked.append((-score, -newness, at))
    # Best first, ties newest first, then in the order read (as a stable sort of the rows).
    ranked.sort()
    tied = any(ranked[i][:2] == ranked[i + 1][:2] for i in range(min(limit, len(ranked) - 1)))
    hits = [ChannelHit(id=rows[at][0], score=-score, created_order=-newness) for score, newness, at in ranked[:limit]]
    return hits, tied


def flags_mask(flags: list[str]) -> str:
    """SQL of the bits of the words a row holds (`_bm25`'s mask) from each word's condition (a
    condition that is NULL holds nothing)."""
    return " + ".join(f"(CASE WHEN {flag} THEN {1 << i} ELSE 0 END)" for i, flag in enumerate(flags)) or "0"


# The planner's estimate of the rows of the whole entry table (all agents), read with a scope's size
# (same statement, same minute's cache): what an HNSW walk of the table passes through. -1: unknown.
_table_rows: dict[tuple[Any, ...], int] = {}


def entry_scope_size(scope: EntryScope) -> int:
    """The number of entries of the scope's agent, thread or person (cached a minute: the keyword
    channel's IDF reads it, and other channels choose how to read by it)."""
    return entry_scope_sizes(scope)[0]


def entry_scope_sizes(scope: EntryScope) -> tuple[int, int]:
    """`entry_scope_size` and the planner's estimate of the rows of the whole entry table, read in
    the one statement and cached together (-1 for the table: never analysed). The vector channel
    chooses by their ratio whether a scope is read by the HNSW walk or exactly
    (memoryapp.search.vector)."""
    key = ("entries", *scope.cache_key)

    def count() -> int:
        size_where, size_params = EntryScope(
            agent_id=scope.agent_id, thread_pk=scope.thread_pk, user_id=scope.user_id
        ).where("e")
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), (SELECT c.reltuples::bigint FROM pg_class c WHERE c.oid = 'memoryapp_entry'::regclass)"
                f" FROM memoryapp_entry e WHERE {size_where}",
                size_params,
            )
            size, table = cursor.fetchone()
        with _size_lock:
            if len(_table_rows) > 10_000:
                _table_rows.clear()
            _table_rows[key] = int(table if table is not None else -1)
        return int(size)

    size = _scope_size(key, count)
    with _size_lock:
        table = _table_rows.get(key, -1)
    return size, table


def sender_only_terms(terms: list[str], names: list[str], addressed: frozenset[str]) -> frozenset[str]:
    """The terms that count for a turn only as its sender: the names of the speakers the question
    addresses (memoryapp.search.speakers), whose name in the other speaker's turns only says whom
    they talk to. None when no other word would be left ("Melanie?"): the name is then all there is
    to search, and counts as a word of the text too."""
    only = frozenset(t for t in terms if t in addressed and t in names)
    return only if only and len(only) < len(terms) else frozenset()


def keyword_entries(
    *, scope: EntryScope, analysis: QueryAnalysis, limit: int, addressed: frozenset[str] = frozenset()
) -> list[ChannelHit]:
    """Step 2-4 of the module doc for entries.

    A name the question says is also held by what that person said (the turn's sender). The names
    of `addressed` speakers (memoryapp.search.speakers) are held by their own turns only, not by
    the words of the other's turns that say them ("Thanks, Melanie!"): `sender_only_terms`.

    In a large scope (LARGE_SCOPE rows or more) a query of several words first reads only the
    rows that hold all of them, then all but one, then two of them: a common word alone would
    match thousands of rows (each a heap visit) that could never rank. Only when these find
    fewer than `limit` rows is the plain OR read.
    """
    terms = tsquery_terms(analysis)[:MAX_TERMS]
    if not terms:
        return []
    where, params = scope.where("e")
    total = entry_scope_size(scope)
    names = [t for t in terms if t in analysis.names]
    sender_only = sender_only_terms(terms, names, addressed)
    if encryption_enabled():
        return _keyword_entries_blind(
            scope=scope, terms=terms, names=names, sender_only=sender_only, total=total, limit=limit
        )
    # The words searched in the text (the tsquery's operands): every term but the sender-only names.
    words = [t for t in terms if t not in sender_only]
    params = {**params, "q_or": " | ".join(words), "cap": KEYWORD_CANDIDATES}
    flags = []
    for i, term in enumerate(terms):
        params[f"q_{i}"] = term
        if term in sender_only:
            flag = f"lower(e.sender_name) = %(q_{i})s"
        else:
            flag = f"e.search_vector @@ to_tsquery('english', %(q_{i})s)"
            if term in names:
                # A name the question says is also held by what that person said (sender_name).
                flag = f"({flag} OR lower(e.sender_name) = %(q_{i})s)"
        flags.append(flag)
    if names:
        params["names"] = names

    def read(query: str, also: str | None = None, ordered: bool = True) -> list[tuple[str, int, int, float, bool]]:
        """The matches of `query`, best first (in no order unless `ordered`, while they are no more
        than the cap): (id, the words it holds as bits, lexemes, newness, whether the row also
        matches `also`)."""
        match = "e.search_vector @@ to_tsquery('english', %(q_match)s)"
        also_sql = "e.search_vector @@ to_tsquery('english', %(q_also)s)" if also is not None else "false"
        if names:
            match = f"({match} OR lower(e.sender_name) = ANY(%(names)s))"
            if also is not None:
                also_sql = f"({also_sql} OR lower(e.sender_name) = ANY(%(names)s))"
        order = "ORDER BY ts_rank_cd(e.search_vector, to_tsquery('english', %(q_or)s)) DESC" if ordered else ""
        sql = f"""
            SELECT e.id, {flags_mask(flags)}, coalesce(length(e.search_vector), 0),
                   (extract(epoch FROM e.created_at) + e.seq * 1e-6)::float8, coalesce({also_sql}, false)
              FROM memoryapp_entry e
             WHERE {where} AND {match}
             {order}
             LIMIT %(cap)s
        """
        with connection.cursor() as cursor:
            # The newness a float8 (exactly what float() of the numeric gives: both round it to
            # the nearest double), so that no row needs a Decimal.
            cursor.execute(
                sql,
                {**params, "q_match": query, "q_also": also, "cap": KEYWORD_CANDIDATES + (0 if ordered else 1)},
            )
            found = cursor.fetchall()
        # More matches than the cap: which of them are kept is the rank's choice.
        return read(query, also) if len(found) > KEYWORD_CANDIDATES else found

    def plain(found: list[tuple[str, int, int, float, bool]]) -> list[tuple[str, int, int, float]]:
        return [r[:4] for r in found]

    def gather(ordered: bool) -> list[tuple[str, int, int, float]]:
        """The rows the tiers below choose, each read `ordered` or not."""
        rows: list[tuple[str, int, int, float]] = []
        if total >= LARGE_SCOPE and len(words) >= 2:
            # Most selective first: every word, then any two words; each tier is read only when the
            # one before found fewer rows than asked for.
            tiers = [" & ".join(words)]
            if len(words) >= 4:
                # One word of the question is often not in memory at all ("... in 2019?").
                tiers.append(" | ".join("(" + " & ".join(c) + ")" for c in combinations(words, len(words) - 1)))
            if len(words) >= 3:
                tiers.append(" | ".join(f"({a} & {b})" for a, b in combinations(words, 2)))
            if len(tiers) >= 2 and total <= MERGED_TIERS_MAX_SCOPE:
                # The first two tiers in one read (each GIN scan has a fixed cost, the pending list's):
                # the second tier's rows, each flagged whether it matches the first. Its matches are a
                # subset of the second's, so when that read is not capped it holds all of them, in
                # the same order: the same rows as reading the first tier alone.
                second = read(tiers[1], also=tiers[0], ordered=ordered)
                capped = len(second) >= KEYWORD_CANDIDATES
                rows = plain(read(tiers[0], ordered=ordered) if capped else [r for r in second if r[4]])
                if len(rows) < limit:
                    rows = plain(second)
                tiers = tiers[2:] if len(rows) < limit else []
            for query in tiers:
                rows = plain(read(query, ordered=ordered))
                if len(rows) >= limit:
                    break
        if len(rows) < limit:
            rows = plain(read(" | ".join(words), ordered=ordered))
        return rows

    def ranked(rows: list[tuple[str, int, int, float]]) -> tuple[list[ChannelHit], bool]:
        size = max(total, len(rows) * 4) if len(rows) >= KEYWORD_CANDIDATES else total
        return _bm25_ranked(rows, terms=len(terms), total=max(size, len(rows)), limit=limit)

    # Within a thread the rows are read in no order (ranking them by cover density was a third of
    # the read's CPU; issue 26) unless they are more than the cap: BM25 orders them by score, then
    # newness, which tell a thread's rows apart; should two rows tie on both where the page is laid
    # out, they are read again ranked, as before, so that the answer is the same. So is a scope of
    # no more rows than the cap (an agent's or a person's): every match is read whatever the order,
    # and the rank was most of the read (260 matches of an agent's 270 rows: 1.0-1.3 against
    # 3.7-4.6 ms a statement). A larger one would read its rows twice whenever they pass the cap.
    unordered = scope.thread_pk is not None or total <= KEYWORD_CANDIDATES
    hits, tied = ranked(gather(ordered=not unordered))
    if unordered and tied:
        hits, _ = ranked(gather(ordered=True))
    return hits


def sender_name_key(name: str, *, key: bytes) -> str:
    """What `sender_name_hashes::text` is for a sender named `name` (one word, as
    `lower(sender_name) = name` reads with encryption off): the array of its one keyed hash."""
    hashed = term_hash(name, key=key)
    return "" if hashed is None else "{" + str(hashed) + "}"


def _keyword_entries_blind(
    *,
    scope: EntryScope,
    terms: list[str],
    names: list[str],
    sender_only: frozenset[str] = frozenset(),
    total: int,
    limit: int,
) -> list[ChannelHit]:
    """keyword_entries with encryption on: the rows whose blind index holds any of the words' keyed
    hashes (GIN over `keyword_hashes`), ranked as the plaintext channel ranks them (BM25 with binary
    term frequency over the words held; the row's length is its number of distinct words). Postgres'
    cover density cannot be had without positions: the candidates are the rows holding most words,
    newest first. A name of `sender_only` is held by its sender's turns only, as in plaintext."""
    # The words hashed under each key the agent's rows may be hashed under (one, but while a rotation
    # with new keys walks the rows): a row holds a word when it holds its hash under any of them.
    keys = blind_keys(agent_id=scope.agent_id)
    by_key = [[term_hash(t, key=key) for t in terms] for key in keys]
    where, params = scope.where("e")
    # The words a turn's text may hold (a name of `sender_only` is not one of them).
    held_at = [
        i
        for i, (t, hashed) in enumerate(zip(terms, by_key[0], strict=True))
        if hashed is not None and t not in sender_only
    ]
    held = [[h for i in held_at if (h := hashes[i]) is not None] for hashes in by_key]
    params = {**params, "any": [h for hashes in held for h in hashes], "cap": KEYWORD_CANDIDATES}
    flags = []
    for i, term in enumerate(terms):
        params[f"h_{i}"] = [hashes[i] if hashes[i] is not None else 0 for hashes in by_key]
        flag = f"coalesce(e.keyword_hashes && %(h_{i})s::bigint[], false)"
        if term in names:
            # The sender's name is sealed: a name of one word is the one hash of its blind index.
            params[f"n_{i}"] = [sender_name_key(term, key=key) for key in keys]
            sender = f"e.sender_name_hashes::text = ANY(%(n_{i})s)"
            flag = sender if term in sender_only else f"({flag} OR {sender})"
        flags.append(flag)
    name_match = ""
    if names:
        params["names"] = [sender_name_key(t, key=key) for t in names for key in keys]
        name_match = " OR e.sender_name_hashes::text = ANY(%(names)s)"
    newness = "extract(epoch FROM e.created_at) + e.seq * 1e-6"

    def read(match: str, extra: dict[str, Any]) -> list[Any]:
        sql = f"""
            SELECT e.id, {", ".join(flags)}, coalesce(cardinality(e.keyword_hashes), 0), {newness}
              FROM memoryapp_entry e
             WHERE {where} AND ({match}{name_match})
             ORDER BY {" + ".join(f"({f})::int" for f in flags)} DESC, {newness} DESC
             LIMIT %(cap)s
        """
        with connection.cursor() as cursor:
            cursor.execute(sql, {**params, **extra})
            return cursor.fetchall()

    raw: list[Any] = []
    n_held = len(held_at)
    if total >= LARGE_SCOPE and n_held >= 2:
        # As the plaintext channel does in a large scope: the rows holding every word first, then
        # all but one, then any two, each tier read only when the one before found too few rows
        # (a row's words are all hashed under one key: a group of words is asked under each).
        def groups(size: int) -> list[list[int]]:
            return [[hashes[i] for i in c] for c in combinations(range(n_held), size) for hashes in held]

        tiers = [groups(n_held)]
        if n_held >= 4:
            tiers.append(groups(n_held - 1))
        if 3 <= n_held <= 8:
            tiers.append(groups(2))
        for tier in tiers:
            match = " OR ".join(f"e.keyword_hashes @> %(t_{i})s::bigint[]" for i in range(len(tier)))
            raw = read(match, {f"t_{i}": group for i, group in enumerate(tier)})
            if len(raw) >= limit:
                break
    if len(raw) < limit:
        raw = read("e.keyword_hashes && %(any)s::bigint[]", {})
    n = len(terms)
    rows = [(r[0], _mask(r[1 : 1 + n]), int(r[1 + n] or 0), float(r[2 + n])) for r in raw]
    if len(rows) >= KEYWORD_CANDIDATES:
        total = max(total, len(rows) * 4)
    return _bm25(rows, terms=n, total=max(total, len(rows)), limit=limit)


def _mask(flags: Any) -> int:
    """The bits of the words held (`_bm25`) of a row's flags (word i held: flag i true)."""
    return sum(1 << i for i, held in enumerate(flags) if held)


def keyword_items(
    *, items: QuerySet[MemoryItem], agent_id: int, analysis: QueryAnalysis, limit: int
) -> list[ChannelHit]:
    """The items of `items` (all of the agent `agent_id`) holding the query's words, ranked as the
    module's steps say."""
    terms = tsquery_terms(analysis)[:MAX_TERMS]
    if not terms:
        return []
    if encryption_enabled():
        return _keyword_items_blind(items=items, agent_id=agent_id, terms=terms, limit=limit)
    table = MemoryItem._meta.db_table
    column = f'"{table}"."search_vector"'
    annotations: dict[str, Any] = {
        f"holds_{i}": RawSQL(f"{column} @@ to_tsquery('english', %s)", (term,), output_field=BooleanField())
        for i, term in enumerate(terms)
    }
    annotations["lexemes"] = RawSQL(f"length({column})", (), output_field=IntegerField())
    matched = (
        items.alias(
            kw_match=RawSQL(f"{column} @@ to_tsquery('english', %s)", (" | ".join(terms),), output_field=BooleanField())
        )
        .filter(kw_match=True)
        .annotate(**annotations)
        .order_by(RawSQL(f"ts_rank_cd({column}, to_tsquery('english', %s))", (" | ".join(terms),)).desc())
        .values_list("id", "recorded_at", "lexemes", *[f"holds_{i}" for i in range(len(terms))])[:KEYWORD_CANDIDATES]
    )
    rows = [(str(r[0]), _mask(r[3:]), int(r[2] or 0), r[1].timestamp() if r[1] else 0.0) for r in matched]
    if not rows:
        return []
    total = _scope_size(("items", str(items.query)), items.count) if len(rows) < KEYWORD_CANDIDATES else len(rows) * 4
    return _bm25(rows, terms=len(terms), total=total, limit=limit)


def _keyword_items_blind(
    *, items: QuerySet[MemoryItem], agent_id: int, terms: list[str], limit: int
) -> list[ChannelHit]:
    """keyword_items with encryption on. A word is held by an item when its attribute holds it (the
    plaintext `search_vector`, which also still holds the subject and value of a row written before
    encryption was turned on) or when the blind index of its value and subject holds the word's
    keyed hash. Ranked as the plaintext channel ranks (BM25 with binary term frequency; the row's
    length is its lexemes plus its value's and subject's distinct words); without positions for cover density, the candidates
    are the items holding most words, newest first. The words are hashed with the agent's key: the
    items are the agent's (the caller's filter), whose values were hashed with it."""
    keys = blind_keys(agent_id=agent_id)  # one, but while a rotation with new keys walks the rows
    table = MemoryItem._meta.db_table
    vector = f'"{table}"."search_vector"'
    hashes = f'"{table}"."keyword_hashes"'
    hashes_of_terms = [[h for h in (term_hash(t, key=key) for key in keys) if h is not None] for t in terms]
    flags: list[tuple[str, tuple[Any, ...]]] = []
    for term, hashed in zip(terms, hashes_of_terms, strict=True):
        flags.append(
            (
                f"({vector} @@ to_tsquery('english', %s) OR coalesce({hashes} && %s::bigint[], false))",
                (term, hashed or [0]),
            )
        )
    annotations: dict[str, Any] = {
        f"holds_{i}": RawSQL(flag, params, output_field=BooleanField()) for i, (flag, params) in enumerate(flags)
    }
    annotations["lexemes"] = RawSQL(
        f"length({vector}) + coalesce(cardinality({hashes}), 0)", (), output_field=IntegerField()
    )
    held = [h for hashed in hashes_of_terms for h in hashed]
    match = RawSQL(
        f"({vector} @@ to_tsquery('english', %s) OR {hashes} && %s::bigint[])",
        (" | ".join(terms), held),
        output_field=BooleanField(),
    )
    count_held = RawSQL(
        " + ".join(f"({flag})::int" for flag, _ in flags),
        tuple(p for _, params in flags for p in params),
        output_field=IntegerField(),
    )
    matched = (
        items.alias(kw_match=match, kw_held=count_held)
        .filter(kw_match=True)
        .annotate(**annotations)
        .order_by("-kw_held", "-recorded_at")
        .values_list("id", "recorded_at", "lexemes", *[f"holds_{i}" for i in range(len(terms))])[:KEYWORD_CANDIDATES]
    )
    rows = [(str(r[0]), _mask(r[3:]), int(r[2] or 0), r[1].timestamp() if r[1] else 0.0) for r in matched]
    if not rows:
        return []
    total = _scope_size(("items", str(items.query)), items.count) if len(rows) < KEYWORD_CANDIDATES else len(rows) * 4
    return _bm25(rows, terms=len(terms), total=total, limit=limit)
