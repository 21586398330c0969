"""The one search selector: keyword, vector or hybrid search of an agent's entries and items.

Used by POST /api/v1/search, by the context builder's recall, and by `eval_retrieval`, so the
figures the evaluation prints are those of the product.

1. Scope first: the agent (and thread, person, `as_of`, older-than) as one SQL condition for
   entries; for items, a queryset of what the scope may see (active, holding now or at `as_of`).
2. Read the query (memoryapp.search.query): its words, names and kind of question.
3. Run the registered channels (memoryapp.search.channels; the built-in ones in
   memoryapp.search.channel_set): keyword (Postgres full-text) and vector (pgvector) for turns and
   items, and the others a hybrid search runs, each weighted by the kind of question. The vector
   channels are skipped, with a note in `errors`, when the stored vectors do not match the
   configured model or the embedder fails: the search still answers by keyword. Any channel but
   keyword and vector that fails gives nothing, with a note in `errors`. The vector channel ranks
   turns by the question without the names of the speakers it addresses (memoryapp.search.speakers).
4. Hybrid: weighted RRF of the channels' lists, neighbouring turns, MMR (memoryapp.search.hybrid).
5. Load the rows of the final page in one query per kind.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from governance.crypto.fields import value_open
from memoryapp.items.selectors import items_agent_wide, items_for_recall
from memoryapp.models import Agent, MemoryItem, Thread
from memoryapp.precompiled import SCOPE_STAND_INS, SCOPE_TWINS, Precompiled
from memoryapp.search.channel_set import search_channels
from memoryapp.search.channels import ENTRY, ITEM, Channel, ChannelInput
from memoryapp.search.embedders import EmbedderError, embed_query
from memoryapp.search.hybrid import Fused, mmr, pool_size, rrf
from memoryapp.search.keyword import ChannelHit
from memoryapp.search.query import KIND_UPDATE, QueryAnalysis, analyze_query
from memoryapp.search.rerank import configured_reranker, rerank_order
from memoryapp.search.scope import EntryScope
from memoryapp.search.space import vector_space_status
from memoryapp.search.speakers import addressed_speakers, without_addressed_names

METHODS = ("keyword", "vector", "hybrid")
KINDS = ("entries", "items")

logger = logging.getLogger(__name__)

# Fusion calibration, tuned with eval_retrieval on two LoCoMo conversations only (conv-26,
# conv-30; the others are kept for reporting): a small RRF constant lets each channel's first
# rows count (the default 60 flattens them), words weigh a little more than vectors (the
# channels' weights: memoryapp.search.channel_set), and the best NEIGHBOUR_TOP hits pull the
# turns next to them with 30% of their score.
RRF_FUSION_K = 10
# Step 4's neighbours: each of the best NEIGHBOUR_TOP entry hits (the rows a page of ten is laid
# out from) gives the turns up to NEIGHBOUR_REACH away in its thread NEIGHBOUR_SHARE of its score,
# halved (NEIGHBOUR_DECAY) for each further turn: an answer is often one or two turns after the
# question that matched ("Which one?" - "The Hobbit"). Only turns of the same sitting (at most
# NEIGHBOUR_GAP_SECONDS apart): the next session's first turn is not the answer to this one's last.
NEIGHBOUR_SHARE = 0.3
NEIGHBOUR_TOP = 20
NEIGHBOUR_REACH = 2
NEIGHBOUR_DECAY = 0.5
NEIGHBOUR_GAP_SECONDS = 6 * 3600
MMR_LAMBDA = 0.95
# Each channel reads more rows than the page: fusion needs the rows one channel ranks low.
CHANNEL_DEPTH = 3


@dataclass
class Hit:
    kind: str  # "entry" | "item"
    id: str
    text: str
    score: float
    channels: list[str]
    thread_id: str | None = None
    seq: int | None = None
    created_at: datetime | None = None
    role: str = ""
    sender_name: str = ""
    item_kind: str = ""
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    times_retrieved: int = 0

    def as_json(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "kind": self.kind,
            "id": self.id,
            "text": self.text,
            "score": round(self.score, 6),
            "channels": self.channels,
            "thread_id": self.thread_id,
            "created_at": self.created_at.isoformat() if self.created_at else None,
        }
        if self.kind == "entry":
            payload.update(seq=self.seq, role=self.role, sender_name=self.sender_name)
        else:
            payload.update(
                item_kind=self.item_kind,
                valid_from=self.valid_from.isoformat() if self.valid_from else None,
                valid_to=self.valid_to.isoformat() if self.valid_to else None,
            )
        return payload


@dataclass
class SearchOutcome:
    hits: list[Hit] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    embed_ms: float = 0.0
    vector_ok: bool = True
    analysis: QueryAnalysis | None = None
    # Each channel's list as it ran, by (kind, channel name): ids best first.
    channel_lists: dict[tuple[str, str], list[str]] = field(default_factory=dict)


_space_checked: tuple[float, tuple[object, ...], bool, str] | None = None


def vector_space_ok() -> tuple[bool, str]:
    """Whether stored vectors match the configured model (checked at most every 10 s per process
    and configuration)."""

    global _space_checked
    now = time.monotonic()
    key = (settings.EMBEDDER, settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS)
    if _space_checked is None or _space_checked[1] != key or now - _space_checked[0] > 10:
        status = vector_space_status()
        _space_checked = (now, key, status.ok, status.message)
    return _space_checked[2], _space_checked[3]


def items_searchable(
    *,
    agent: Agent,
    thread: Thread | None = None,
    user_id: str | None = None,
    as_of: datetime | None = None,
    purpose: str = "",
) -> QuerySet[MemoryItem]:
    """Items a search may return: those that hold at `as_of` (now) and the scope sees.

    A thread sees the items of its person, its project and its own; a person those of no person and theirs;
    the whole agent every item that holds. Suggested, rejected and stale items never. With a `purpose`,
    only the items collected for it or for none (memoryapp.items.purposes).
    """

    if thread is not None:
        return items_for_recall(
            agent=agent,
            user_id=thread.user_id,
            project_id=thread.project_scope,
            thread_id=thread.external_id,
            as_of=as_of,
            purpose=purpose,
        )
    if user_id is not None:
        return items_for_recall(agent=agent, user_id=user_id, as_of=as_of, purpose=purpose)
    return items_agent_wide(agent=agent, as_of=as_of, purpose=purpose)


def _items_scope_read(shape: str, purposed: bool) -> Callable[..., QuerySet[MemoryItem]]:
    """`items_searchable` of a scope of this shape ("thread", "user" or "agent"; with a purpose or
    without) as a queryset of the first row's id, its every value an argument (`at`: `as_of`, else
    `now`, the clock)."""

    def read(
        agent_id: int, user_id: str, project_id: str, thread_id: str, at: datetime, now: datetime, purpose: str
    ) -> QuerySet[MemoryItem]:
        agent, purpose = Agent(pk=agent_id), purpose if purposed else ""
        if shape == "agent":
            rows = items_agent_wide(agent=agent, as_of=at, purpose=purpose, now=now)
        elif shape == "user":
            rows = items_for_recall(agent=agent, user_id=user_id, as_of=at, purpose=purpose, now=now)
        else:
            rows = items_for_recall(
                agent=agent,
                user_id=user_id,
                project_id=project_id,
                thread_id=thread_id,
                as_of=at,
                purpose=purpose,
                now=now,
            )
        return rows.only("id")[:1]

    return read


# Whether a search's item scope holds any item (asked before the item channels run: most scopes
# hold none), compiled once per process for each shape of scope (memoryapp.precompiled; issue 26:
# the ORM built and compiled that EXISTS on every search, ~26% of a search's CPU). Two sets of
# stand-ins: the scope's '' and the statuses are the statement's constants.
_ITEMS_LIVE: dict[tuple[str, bool], Precompiled[MemoryItem]] = {}
_ITEMS_LIVE_LOCK = threading.Lock()


def _items_live_statement(shape: str, purposed: bool) -> Precompiled[MemoryItem]:
    with _ITEMS_LIVE_LOCK:
        statement = _ITEMS_LIVE.get((shape, purposed))
        if statement is None:
            statement = _ITEMS_LIVE[(shape, purposed)] = Precompiled(
                _items_scope_read(shape, purposed),
                *SCOPE_STAND_INS,
                "\x00purpose",
                twins=(*SCOPE_TWINS, "\x00purpose2"),
            )
        return statement


def items_searchable_live(
    *,
    agent: Agent,
    thread: Thread | None = None,
    user_id: str | None = None,
    as_of: datetime | None = None,
    purpose: str = "",
) -> bool:
    """Whether `items_searchable` of these arguments holds any item, in one statement built once per
    process for the scope's shape."""
    now = timezone.now()
    if thread is not None:
        shape, scope = "thread", (thread.user_id, thread.project_scope, thread.external_id)
    elif user_id is not None:
        shape, scope = "user", (user_id, "", "")
    else:
        shape, scope = "agent", ("", "", "")
    statement = _items_live_statement(shape, bool(purpose))
    return statement.first(agent.pk, *scope, as_of or now, now, purpose) is not None


# The columns of an entry a page shows (`_entry_hit`), over `memoryapp_entry e JOIN memoryapp_thread t`.
# The time as microseconds since the epoch (exact: `extract` gives a numeric), made a datetime here:
# Django's loader parses a timestamptz's text in Python, which was half the client CPU of the
# neighbours' statement (~100 rows a hybrid search; issue 26).
_ENTRY_HIT_COLUMNS = (
    "e.id, e.text, e.seq, (extract(epoch FROM e.created_at) * 1000000)::bigint, e.role, e.sender_name, t.external_id"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _entry_neighbours(
    *, scope: EntryScope, fused: dict[tuple[str, str], Fused], top: int, share: float, preload: int = 0
) -> dict[str, tuple[Any, ...]]:
    """Step 4's neighbours: the turns up to NEIGHBOUR_REACH from the best `top` entry hits, in their
    sitting, in one query. The same statement reads the page's columns (`_entry_hit`) of the neighbours
    and of the entries among the best `preload` fused rows (the only rows the page can be chosen from,
    with the neighbours: a neighbour's share only raises a score), so that step 5 need not read them
    again (issue 26: one round trip less per search and context build). Answers those rows by id."""
    best = sorted((f for f in fused.values() if f.kind == "entry"), key=lambda f: -f.score)[:top]
    if not best or share <= 0:
        return {}
    candidates = [f.id for f in sorted(fused.values(), key=lambda f: -f.score)[:preload] if f.kind == "entry"]
    where, params = scope.where("n")
    params = {
        **params,
        "hit_ids": [f.id for f in best],
        "reach": NEIGHBOUR_REACH,
        "gap": NEIGHBOUR_GAP_SECONDS,
        "candidates": candidates,
    }
    # Each row: (hit id, neighbour id, distance) for a pair, or (NULL, NULL, NULL, the page's columns)
    # for a neighbour or candidate; the candidates are the channels' hits, of the scope already. The
    # ids as one array (an init plan), not `= ANY(...) OR IN (...)`: that OR is a scan of the table.
    # A hit's neighbours are one range of the thread's (thread_id, seq) index. Joined to a series of
    # offsets instead, an agent newer than the table's statistics (estimated at a row) had every
    # turn of the agent read for each hit and then each pair of them for each offset: 4-15 ms of
    # the server's time a search under bench/load.py; the range filters those turns once, 2-5x
    # less (issue 26).
    sql = f"""
        WITH pairs AS (
            SELECT h.id AS hit_id, n.id AS near_id, abs(n.seq - h.seq) AS distance FROM memoryapp_entry h
              JOIN memoryapp_entry n ON n.thread_id = h.thread_id
                   AND n.seq BETWEEN h.seq - %(reach)s AND h.seq + %(reach)s AND n.seq <> h.seq
             WHERE h.id = ANY(%(hit_ids)s) AND h.agent_id = %(s_agent)s
               AND abs(extract(epoch FROM n.created_at - h.created_at)) <= %(gap)s AND {where}
        )
        SELECT hit_id, near_id, distance, NULL::varchar, NULL::text, NULL::bigint, NULL::bigint,
               NULL::varchar, NULL::varchar, NULL::varchar FROM pairs
        UNION ALL
        SELECT NULL, NULL, NULL, {_ENTRY_HIT_COLUMNS}
          FROM memoryapp_entry e JOIN memoryapp_thread t ON t.id = e.thread_id
         WHERE e.agent_id = %(s_agent)s
           AND e.id = ANY(%(candidates)s::varchar[] || ARRAY(SELECT near_id FROM pairs))
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    score_of = {f.id: f.score for f in best}
    rows: dict[str, tuple[Any, ...]] = {}
    for hit_id, neighbour_id, distance, *columns in found:
        if hit_id is None:
            rows[columns[0]] = tuple(columns)
            continue
        row = fused.setdefault(("entry", neighbour_id), Fused(kind="entry", id=neighbour_id))
        row.score += share * NEIGHBOUR_DECAY ** (distance - 1) * score_of[hit_id]
        if "neighbour" not in row.channels:
            row.channels.append("neighbour")
    return rows


def _entry_hit(row: tuple[Any, ...]) -> Hit:
    """A page's hit of an entry's `_ENTRY_HIT_COLUMNS`, without score (no model instance: it is hot)."""
    return Hit(
        kind="entry",
        id=row[0],
        text=value_open(row[1], table="memoryapp_entry", column="text"),
        score=0.0,
        channels=[],
        seq=row[2],
        created_at=_EPOCH + timedelta(microseconds=row[3]) if row[3] is not None else None,
        role=row[4],
        sender_name=value_open(row[5], table="memoryapp_entry", column="sender_name"),
        thread_id=row[6],
    )


def _load_entries(ids: list[str], read: dict[str, tuple[Any, ...]] | None = None) -> dict[str, Hit]:
    """The rows of the page, as hits without score: those of `read` (the neighbours' statement read
    them), the others in one query."""
    read = read or {}
    missing = [i for i in ids if i not in read]
    rows = [read[i] for i in ids if i in read]
    if missing:
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT {_ENTRY_HIT_COLUMNS}
                  FROM memoryapp_entry e JOIN memoryapp_thread t ON t.id = e.thread_id
                 WHERE e.id = ANY(%s)
                """,
                [missing],
            )
            rows += cursor.fetchall()
    return {r[0]: _entry_hit(r) for r in rows}


def _load_items(ids: list[str]) -> dict[str, Hit]:
    if not ids:
        return {}
    rows = MemoryItem.objects.filter(id__in=ids).values_list(
        "id",
        "value",
        "subject",
        "attribute",
        "kind",
        "recorded_at",
        "valid_from",
        "valid_to",
        "thread_id",
        "times_retrieved",
    )
    return {
        r[0]: Hit(
            kind="item",
            id=r[0],
            text=f"{r[2]} {r[3]}: {r[1]}" if r[2] and r[3] else r[1],
            score=0.0,
            channels=[],
            created_at=r[5],
            item_kind=r[4],
            valid_from=r[6],
            valid_to=r[7],
            thread_id=r[8] or None,
            times_retrieved=r[9] or 0,
        )
        for r in rows
    }


def search(
    *,
    agent: Agent,
    text: str,
    thread: Thread | None = None,
    user_id: str | None = None,
    kinds: Sequence[str] = KINDS,
    limit: int = 10,
    method: str = "hybrid",
    as_of: datetime | None = None,
    items: QuerySet[MemoryItem] | None = None,
    before_seq: int | None = None,
    exclude_ids: Sequence[str] = (),
    neighbours: bool = True,
    diversify: bool = True,
    min_similarity: float | None = None,
    purpose: str = "",
    channels: Sequence[str] | None = None,
    anchor: datetime | None = None,
    time_zone: str = "",
    skip_small_talk: bool = False,
    items_live: bool | None = None,
) -> SearchOutcome:
    """Search the agent's memory (see the module's steps). Never raises for a failed channel.

    `min_similarity` (recall uses it) keeps only vector hits with at least that cosine and at
    least RELATIVE_FLOOR of the best one: a ranked list always has a first row, relevant or not.
    `channels` runs only the registered channels of these names (eval_retrieval: a channel alone).
    `anchor` is "now" for the question (relative times such as "last May" resolve against it;
    default `as_of`, else the newest turn of the scope), in `time_zone` (default the thread's
    `metadata.time_zone`, else UTC). With `skip_small_talk` (recall), small talk ("thanks!") is
    not searched: no hits, and a warning says why. `items_live` is what the caller already read of
    whether the item scope holds any item (the context builder: its facts are that scope's items);
    None: the search asks.
    """
    outcome = SearchOutcome()
    scope = EntryScope(
        agent_id=agent.pk,
        thread_pk=thread.pk if thread is not None else None,
        user_id=user_id if thread is None else None,
        as_of=as_of,
        before_seq=before_seq,
        exclude_ids=tuple(exclude_ids),
    )
    analysis = analyze_query(text)
    outcome.analysis = analysis
    if skip_small_talk and analysis.small_talk:
        outcome.warnings.append("small talk: not searched")
        return outcome
    wanted = [
        c
        for c in search_channels()
        if ((c.kind == ENTRY and "entries" in kinds) or (c.kind == ITEM and "items" in kinds))
        and (c.name in channels if channels is not None else channel_switched_on(c))
    ]
    # A scope without items (common: a context build of a thread with no memory yet) skips the item
    # channels: one cheap EXISTS instead of searches that would find nothing. The scope's own
    # queryset is built only when it holds items (building it is a good part of a search's CPU):
    # else the empty one stands for it (a channel reading it finds what the scope holds, nothing).
    item_rows: QuerySet[MemoryItem] | None = None
    no_items = False
    if "items" in kinds:
        if items is not None:
            item_rows = items.filter(agent=agent)  # a caller's queryset never widens the agent
            if any(c.kind == ITEM for c in wanted):
                no_items = not (items_live if items_live is not None else item_rows.exists())
        else:
            if any(c.kind == ITEM for c in wanted):
                no_items = not (
                    items_live
                    if items_live is not None
                    else items_searchable_live(
                        agent=agent, thread=thread, user_id=user_id, as_of=as_of, purpose=purpose
                    )
                )
            item_rows = (
                MemoryItem.objects.none()
                if no_items
                else items_searchable(agent=agent, thread=thread, user_id=user_id, as_of=as_of, purpose=purpose)
            )
    # The speakers the question names whose name in the other's turns only addresses them
    # (memoryapp.search.speakers): left out of the vector the vector channel ranks turns by, and
    # counted only in their own turns by the keyword channel and the rerank.
    speakers = addressed_speakers(scope, analysis) if "entries" in kinds else frozenset()
    vector, turn_vector = _query_vectors(text, speakers, wanted, method, outcome)
    if vector is None and method == "vector":
        # The vector channel is down: answer by keyword rather than with nothing.
        method = "keyword"
    ci = ChannelInput(
        agent_id=agent.pk,
        scope=scope,
        analysis=analysis,
        depth=max(limit * CHANNEL_DEPTH, 30),
        items=item_rows,
        no_items=no_items,
        vector=vector,
        turn_vector=turn_vector,
        addressed=speakers,
        min_similarity=min_similarity,
        anchor=anchor or as_of,
        time_zone=time_zone or (str((thread.metadata or {}).get("time_zone") or "") if thread is not None else ""),
        errors=outcome.errors,
    )
    lists: list[tuple[str, str, list[ChannelHit], float]] = []
    for channel in wanted:
        if method not in channel.methods or (channel.needs_vector and vector is None):
            continue
        weight = channel.weight(analysis.kind)
        if weight <= 0 or (channel.applies is not None and not channel.applies(ci)):
            continue
        found = _run_channel(channel, ci)
        ci.found[(channel.kind, channel.name)] = found
        lists.append((channel.kind, channel.name, found, weight))
    outcome.channel_lists = {(kind, name): [h.id for h in found] for kind, name, found, _ in lists}

    diversified = diversify and method == "hybrid"
    fused_rows, read = _fuse(
        scope=scope, lists=lists, method=method, neighbours=neighbours, preload=_pool_count(limit, diversified)
    )
    outcome.hits = _hits(
        fused_rows,
        limit=limit,
        diversify=diversified,
        analysis=analysis,
        outcome=outcome,
        speakers=speakers if diversified else frozenset(),
        read=read,
    )
    return outcome


def _pool_count(limit: int, diversify: bool) -> int:
    """How many of the best fused rows step 5 lays its page out from (`_hits`' pool)."""
    if not diversify:
        return limit
    return max(pool_size(limit), settings.RERANKER_TOP if settings.RERANKER != "none" else 0)


_CORE_CHANNELS = frozenset({"keyword", "vector"})


def channel_switched_on(channel: Channel) -> bool:
    """Whether the channel's setting (if it names one) is on: a search runs it unless asked for others."""
    return not channel.setting or bool(getattr(settings, channel.setting, False))


def _run_channel(channel: Channel, ci: ChannelInput) -> list[ChannelHit]:
    """One channel's list. Keyword and vector run as they are (their failure is the search's); any
    other channel that fails gives nothing, with a note in `errors`. Channels only read: outside a
    transaction (a served search or build) a failed read leaves nothing to undo, so a channel runs as
    it is (a savepoint would cost two round trips per channel); inside one, in a savepoint, so that
    its failure does not abort the caller's transaction."""
    if channel.name in _CORE_CHANNELS:
        return channel.run(ci)
    try:
        if not connection.in_atomic_block:
            return channel.run(ci)
        with transaction.atomic():
            return channel.run(ci)
    except Exception as exc:
        logger.exception("search channel %s/%s failed", channel.kind, channel.name)
        ci.errors.append({"source": f"channel:{channel.name}", "message": str(exc)})
        return []


def _query_vectors(
    text: str, speakers: frozenset[str], wanted: list[Channel], method: str, outcome: SearchOutcome
) -> tuple[list[float] | None, list[float] | None]:
    """The question's vector (for every channel that ranks by one) and the vector channel's for turns:
    the question without the names of `speakers` (memoryapp.search.speakers), embedded apart only
    when it differs. (None, None) when vectors are off or the embedder failed (said once in `errors`)."""
    if method not in ("vector", "hybrid") or not text.strip():
        return None, None
    if not any((c.needs_vector or c.uses_vector) and method in c.methods for c in wanted):
        return None, None
    vector = _query_vector(text, outcome)
    if vector is None:
        return None, None
    turn_text = without_addressed_names(text, speakers)
    if turn_text == text or not any(c.kind == ENTRY and c.name == "vector" and method in c.methods for c in wanted):
        return vector, vector
    # Should that second embedding fail, the turns are ranked by the whole question's vector (the
    # vector channels still run: the failure is noted, not told as vector search being off).
    return vector, _query_vector(turn_text, outcome, fallback=True) or vector


def _query_vector(text: str, outcome: SearchOutcome, *, fallback: bool = False) -> list[float] | None:
    """The text's embedding, or None with a note in `errors` (and, unless the caller has a `fallback`
    vector to rank by, in `warnings`: vector search is off for this search)."""
    ok, message = vector_space_ok()
    if not ok:
        outcome.vector_ok = False
        outcome.errors.append({"source": "vector", "message": message})
        outcome.warnings.append("vector search is off: keyword results only")
        return None
    started = time.perf_counter()
    try:
        vector = embed_query(text)
    except EmbedderError as exc:
        if fallback:
            outcome.errors.append({"source": "embedder", "message": f"{exc} (turns ranked by the whole question)"})
            return None
        outcome.vector_ok = False
        outcome.errors.append({"source": "embedder", "message": str(exc)})
        outcome.warnings.append("the embedder failed: keyword results only")
        return None
    finally:
        outcome.embed_ms += (time.perf_counter() - started) * 1000
    return vector


def _fuse(
    *,
    scope: EntryScope,
    lists: list[tuple[str, str, list[ChannelHit], float]],
    method: str,
    neighbours: bool,
    preload: int = 0,
) -> tuple[list[Fused], dict[str, tuple[Any, ...]]]:
    """The fused rows, best first, and the page's columns of the entries the neighbours' statement
    read (the neighbours and the entries among the best `preload` rows; see `_entry_neighbours`)."""
    if method != "hybrid":
        # One method's channels: their own scores and order, no fusion needed.
        rows: list[Fused] = []
        for kind, channel, hits, _ in lists:
            rows.extend(Fused(kind=kind, id=h.id, score=h.score, channels=[channel]) for h in hits)
        rows.sort(key=lambda f: -f.score)
        return rows, {}
    fused = rrf(lists, k=RRF_FUSION_K)
    read: dict[str, tuple[Any, ...]] = {}
    if neighbours:
        read = _entry_neighbours(scope=scope, fused=fused, top=NEIGHBOUR_TOP, share=NEIGHBOUR_SHARE, preload=preload)
    return sorted(fused.values(), key=lambda f: -f.score), read


def _hits(
    rows: list[Fused],
    *,
    limit: int,
    diversify: bool,
    analysis: QueryAnalysis | None = None,
    outcome: SearchOutcome | None = None,
    speakers: frozenset[str] = frozenset(),
    read: dict[str, tuple[Any, ...]] | None = None,
) -> list[Hit]:
    """Step 5: the page (its entries' rows taken from `read` when the neighbours' statement read them). A fused search (`diversify`) reranks its best rows by the share of the
    question's words they hold, recency and use (`rerank_by_words_and_use`), lays them out by MMR,
    and lets the configured reranker reorder the best RERANKER_TOP (memoryapp.search.rerank)."""
    reranker = configured_reranker() if diversify and analysis is not None else None
    top = settings.RERANKER_TOP if reranker is not None else 0
    pool = rows[: max(pool_size(limit), top)] if diversify else rows[:limit]
    loaded = {("entry", k): v for k, v in _load_entries([r.id for r in pool if r.kind == "entry"], read).items()}
    loaded.update({("item", k): v for k, v in _load_items([r.id for r in pool if r.kind == "item"]).items()})
    pool = [r for r in pool if (r.kind, r.id) in loaded]
    texts = {key: hit.text for key, hit in loaded.items()}
    if diversify and analysis is not None:
        pool = rerank_by_words_and_use(pool, loaded, analysis, speakers=speakers)
    chosen = mmr(pool, texts, limit=max(limit, top), lambda_=MMR_LAMBDA) if diversify else pool[:limit]
    if reranker is not None and analysis is not None:
        order, error = rerank_order(reranker, analysis.text, [texts[(r.kind, r.id)] for r in chosen], top=top)
        chosen = [chosen[i] for i in order]
        if error is not None and outcome is not None:
            outcome.errors.append(error)
    hits: list[Hit] = []
    for r in chosen[:limit]:
        hit = loaded[(r.kind, r.id)]
        hit.score, hit.channels = r.score, r.channels
        hits.append(hit)
    return hits


# Step 5's reranking of the fused rows (004: "reranked by the share of the input's words a hit
# holds, biased a little toward recent turns and toward items sent to a model more often"): each
# row's fused score times (1 + WORD_SHARE_WEIGHT x the share of the question's words it holds)
# x (1 + RECENCY_BIAS x its place between the pool's oldest and newest row) x (1 + USE_BIAS x its
# use against the most used item of the pool). An update question ("where do I live now?") leans
# harder toward what was said last.
WORD_SHARE_WEIGHT = 0.3
# A turn of the side the question asks about (memoryapp.search.query.question_voice: the person's own
# turns for "what did I buy?", the assistant's for "what did you recommend?") counts 1 + VOICE_BIAS.
VOICE_BIAS = 0.3
RECENCY_BIAS = 0.05
UPDATE_RECENCY_BIAS = 0.2
USE_BIAS = 0.05
_STEM_SUFFIXES = ("ing", "ed", "es", "s")


def _stem(word: str) -> str:
    for suffix in _STEM_SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def word_share(terms: list[str], text: str) -> float:
    """The share of `terms` (the question's words) the text holds, each compared by a crude stem."""
    if not terms:
        return 0.0
    held = {_stem(w) for w in _TEXT_WORD.findall(text.lower())}
    return sum(1 for t in terms if _stem(t) in held) / len(terms)


_TEXT_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script, as memoryapp.search.query reads them


def rerank_by_words_and_use(
    pool: list[Fused],
    loaded: dict[tuple[str, str], Hit],
    analysis: QueryAnalysis,
    *,
    speakers: frozenset[str] = frozenset(),
) -> list[Fused]:
    """The pool's scores times the word share, recency and use factors above, best first. The names
    of `speakers` count for a turn only when they said it (memoryapp.search.speakers)."""
    if not pool:
        return pool
    terms = [t for piece in analysis.terms for t in _TEXT_WORD.findall(piece)]
    stamps = [h.created_at.timestamp() for h in loaded.values() if h.created_at is not None]
    oldest, newest = (min(stamps), max(stamps)) if stamps else (0.0, 0.0)
    span = newest - oldest
    recency = UPDATE_RECENCY_BIAS if analysis.kind == KIND_UPDATE else RECENCY_BIAS
    most_used = max((h.times_retrieved for h in loaded.values() if h.kind == "item"), default=0)
    for row in pool:
        hit = loaded[(row.kind, row.id)]
        # A turn holds its sender's name too ("What does Melanie paint?" and Melanie's own turn).
        text = f"{hit.text} {hit.sender_name}"
        if speakers and hit.kind == "entry":
            # The other speaker's turn naming the person addresses them ("Thanks, Melanie!"):
            # memoryapp.search.speakers.
            own = hit.sender_name.lower()
            text = " ".join(w for w in _TEXT_WORD.findall(text.lower()) if w not in speakers or w == own)
        factor = 1 + WORD_SHARE_WEIGHT * word_share(terms, text)
        if analysis.voice and hit.kind == "entry" and hit.role == analysis.voice:
            factor *= 1 + VOICE_BIAS
        if span > 0 and hit.created_at is not None:
            factor *= 1 + recency * (hit.created_at.timestamp() - oldest) / span
        if most_used > 0 and hit.kind == "item":
            factor *= 1 + USE_BIAS * math.log1p(hit.times_retrieved) / math.log1p(most_used)
        row.score *= factor
    return sorted(pool, key=lambda f: -f.score)
