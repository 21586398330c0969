"""The channels of 004 that walk memory's graph: items by the entities the question names, a
personalized PageRank walk over items, entities and the turns they stand on, and turns reached
through the evidence of the best items.

Registered in memoryapp.search.channels (imported at the end of memoryapp.search.channel_set):

| kind  | name      | finds                                                                        |
| item  | entity    | the items about the entities the question names, newest state first         |
| item  | ppr       | items by a personalized PageRank walk from the named entities and best items |
| entry | ppr       | turns by the same walk (their quotes tie them to items, edges and entities)   |
| entry | evidence  | the turns the best items' quotes stand on, in the items' order               |

The walk's graph is read around its seeds only (one hop of edges, the items of those entities,
their quotes), so its cost follows the question, not the size of memory. Every read is the
search's scope: entities and edges the thread's scope sees, items of the search's item set (or,
when only turns are asked for, those the scope would recall), turns through `EntryScope.where`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from django.db import connection
from django.db.models import Q, QuerySet

from memoryapp.graph.selectors import entities_named_in, relations_visible
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import items_agent_wide, items_for_recall, thread_context_scope
from memoryapp.models import Agent, Evidence, MemoryItem, RelationEvidence, Thread
from memoryapp.search.channels import ENTRY, ITEM, Channel, ChannelInput, register
from memoryapp.search.keyword import ChannelHit, keyword_items
from memoryapp.search.vector import vector_items

# The walk: restart probability, iterations (the mass left to move after 20 steps is 0.85^20 ~ 4%).
PPR_RESTART = 0.15
PPR_STEPS = 20
# Seeds taken from the best items of the item channels (or of the walk's own item search).
BEST_ITEMS = 5
# Bounds of the graph read around the seeds.
MAX_ITEMS_READ = 400
MAX_EDGES_READ = 400


def _memory_scope(ci: ChannelInput) -> Scope | None:
    """The scope of memory the search reads: the thread's (person, project, itself), a person's, or
    None for the whole agent."""
    key = "graph.scope"
    if key not in ci.memo:
        scope: Scope | None = None
        if ci.scope.thread_pk is not None:
            thread = Thread.objects.filter(pk=ci.scope.thread_pk, agent_id=ci.agent_id).first()
            scope = thread_context_scope(thread) if thread is not None else Scope()
        elif ci.scope.user_id is not None:
            scope = Scope(user_id=ci.scope.user_id)
        ci.memo[key] = scope
    found: Scope | None = ci.memo[key]
    return found


def _items(ci: ChannelInput) -> QuerySet[MemoryItem]:
    """The items the search may return: its own set, else those its scope would recall."""
    if ci.items is not None:
        return ci.items
    scope = _memory_scope(ci)
    agent = Agent(pk=ci.agent_id)
    if scope is None:
        return items_agent_wide(agent=agent, as_of=ci.scope.as_of)
    return items_for_recall(
        agent=agent,
        user_id=scope.user_id,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        as_of=ci.scope.as_of,
    )


def named_entities(ci: ChannelInput) -> list[str]:
    """The entities the question names (computed once per search)."""
    key = "graph.named"
    if key not in ci.memo:
        scope = _memory_scope(ci)
        ci.memo[key] = [
            e.pk for e in entities_named_in(agent=Agent(pk=ci.agent_id), scope=scope, text=ci.analysis.text)
        ]
    named: list[str] = ci.memo[key]
    return named


def best_items(ci: ChannelInput) -> list[str]:
    """The best items for the question: fused from the item channels that ran (keyword, vector), or,
    when none did (a search of turns only), from an item search of its own."""
    key = "graph.best_items"
    if key in ci.memo:
        best: list[str] = ci.memo[key]
        return best
    lists = [hits for (kind, name), hits in ci.found.items() if kind == ITEM and name in ("keyword", "vector")]
    if not lists:
        items = _items(ci)
        if items.exists():
            lists.append(keyword_items(items=items, agent_id=ci.agent_id, analysis=ci.analysis, limit=BEST_ITEMS * 2))
            if ci.vector is not None:
                found = vector_items(items=items, vector=ci.vector, limit=BEST_ITEMS * 2)
                floor = max(ci.min_similarity or 0.0, 0.6 * found[0].score) if found else 0.0
                lists.append([h for h in found if h.score >= floor])
    score: dict[str, float] = defaultdict(float)
    for hits in lists:
        for rank, hit in enumerate(hits, start=1):
            score[hit.id] += 1.0 / (10 + rank)
    best = [item_id for item_id, _ in sorted(score.items(), key=lambda p: (-p[1], p[0]))][:BEST_ITEMS]
    ci.memo[key] = best
    return best


def entries_in_scope(ci: ChannelInput, ids: Sequence[str]) -> set[str]:
    """Of these entries, those the search may see (its one SQL condition)."""
    if not ids:
        return set()
    where, params = ci.scope.where("e")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.id FROM memoryapp_entry e WHERE e.id = ANY(%(ids)s) AND {where}",
            {**params, "ids": list(ids)},
        )
        return {row[0] for row in cursor.fetchall()}


# --- the walk -------------------------------------------------------------------------------------


def _graph_around(ci: ChannelInput, seeds: Iterable[str], item_seeds: Sequence[str]) -> dict[str, set[str]]:
    """The undirected graph the walk moves on, around the seeds: nodes "n:" entities, "i:" items,
    "e:" turns.

    1. The visible active edges touching the seed entities (one hop), and the quotes they stand on:
       entity - entity, and each quoted turn to both ends.
    2. The items about those entities and the seed items, with their entities and their quotes' turns.
    """
    agent = Agent(pk=ci.agent_id)
    scope = _memory_scope(ci)
    adjacency: dict[str, set[str]] = defaultdict(set)

    def link(a: str, b: str) -> None:
        adjacency[a].add(b)
        adjacency[b].add(a)

    entity_ids = set(seeds)
    if entity_ids:
        seed_list = list(entity_ids)
        rows = list(
            relations_visible(agent=agent, scope=scope)
            .filter(Q(subject_id__in=seed_list) | Q(object_id__in=seed_list))
            .order_by("id")
            .values_list("id", "subject_id", "object_id")[:MAX_EDGES_READ]
        )
        ends: dict[str, tuple[str, str]] = {}
        for relation_id, head, tail in rows:
            link(f"n:{head}", f"n:{tail}")
            ends[relation_id] = (head, tail)
            entity_ids.update((head, tail))
        for relation_id, entry_id in RelationEvidence.objects.filter(
            agent=agent, relation_id__in=list(ends), entry__isnull=False
        ).values_list("relation_id", "entry_id"):
            head, tail = ends[relation_id]
            link(f"e:{entry_id}", f"n:{head}")
            link(f"e:{entry_id}", f"n:{tail}")
    items = _items(ci)
    item_rows = list(
        items.filter(entity_id__in=list(entity_ids)).order_by("id").values_list("id", "entity_id")[:MAX_ITEMS_READ]
    ) + list(items.filter(pk__in=list(item_seeds)).values_list("id", "entity_id"))
    for item_id, entity_id in item_rows:
        adjacency[f"i:{item_id}"]
        if entity_id:
            link(f"i:{item_id}", f"n:{entity_id}")
    for item_id, entry_id in Evidence.objects.filter(
        agent=agent, item_id__in=[r[0] for r in item_rows], entry__isnull=False
    ).values_list("item_id", "entry_id"):
        link(f"i:{item_id}", f"e:{entry_id}")
    return adjacency


def personalized_pagerank(
    adjacency: dict[str, set[str]], seeds: dict[str, float], *, restart: float = PPR_RESTART, steps: int = PPR_STEPS
) -> dict[str, float]:
    """Personalized PageRank by power iteration: each step moves (1 - restart) of every node's mass
    evenly to its neighbours and puts `restart` back on the seeds (in their given shares); a node
    with no neighbour gives its mass back to the seeds.

    Deterministic: nodes and neighbours are visited in sorted order, not in the order of the sets
    (which changes with the process's hash seed), so every float sum is taken in the same order and
    the ranks, and the order of equal ones, are the same in every process."""
    total = sum(seeds[node] for node in sorted(seeds))
    if total <= 0:
        return {}
    start = {node: seeds[node] / total for node in sorted(seeds) if node in adjacency}
    if not start:
        return {}
    ordered = {node: sorted(neighbours) for node, neighbours in adjacency.items()}
    rank = dict(start)
    for _ in range(steps):
        moved: dict[str, float] = defaultdict(float)
        lost = 0.0
        for node in sorted(rank):
            mass = rank[node]
            neighbours = ordered.get(node)
            if not neighbours:
                lost += mass
                continue
            share = (1 - restart) * mass / len(neighbours)
            for other in neighbours:
                moved[other] += share
        back = (
            restart + (1 - restart) * lost / max(sum(rank[node] for node in sorted(rank)), 1e-12) if lost else restart
        )
        for node, weight in start.items():
            moved[node] += back * weight
        rank = dict(moved)
    return rank


def _walk(ci: ChannelInput) -> dict[str, float]:
    """The walk's ranks (computed once per search): seeded by the named entities, and by the best
    items with half their weight."""
    key = "graph.walk"
    if key in ci.memo:
        walked: dict[str, float] = ci.memo[key]
        return walked
    named = named_entities(ci)
    items = best_items(ci)
    seeds = {f"n:{e}": 1.0 for e in named}
    for rank, item_id in enumerate(items, start=1):
        seeds[f"i:{item_id}"] = 0.5 / rank
    adjacency = _graph_around(ci, named, items) if seeds else {}
    walked = personalized_pagerank(adjacency, seeds) if adjacency else {}
    ci.memo[key] = walked
    return walked


def _ranked(walk: dict[str, float], prefix: str, *, skip: Iterable[str] = ()) -> list[tuple[str, float]]:
    left_out = set(skip)
    rows = [(node[2:], mass) for node, mass in walk.items() if node.startswith(prefix) and node not in left_out]
    rows.sort(key=lambda pair: (-pair[1], pair[0]))
    return rows


# --- the channels ---------------------------------------------------------------------------------


def _ppr_entries(ci: ChannelInput) -> list[ChannelHit]:
    walk = _walk(ci)
    ranked = _ranked(walk, "e:")[: ci.depth * 2]
    visible = entries_in_scope(ci, [entry_id for entry_id, _ in ranked])
    return [ChannelHit(id=entry_id, score=mass) for entry_id, mass in ranked if entry_id in visible][: ci.depth]


def _ppr_items(ci: ChannelInput) -> list[ChannelHit]:
    if ci.items is None or ci.no_items:
        return []
    walk = _walk(ci)
    ranked = _ranked(walk, "i:")[: ci.depth * 2]
    visible = set(ci.items.filter(pk__in=[i for i, _ in ranked]).values_list("pk", flat=True))
    return [ChannelHit(id=item_id, score=mass) for item_id, mass in ranked if item_id in visible][: ci.depth]


def _entity_items(ci: ChannelInput) -> list[ChannelHit]:
    """The items about the entities the question names, the newest state first (a named person's
    facts are worth reading even when they share no word with the question)."""
    if ci.items is None or ci.no_items:
        return []
    named = named_entities(ci)
    if not named:
        return []
    rows = ci.items.filter(entity_id__in=named).order_by("-valid_from", "-recorded_at").values_list("id", flat=True)
    ids = list(rows[: ci.depth])
    return [ChannelHit(id=item_id, score=1.0 / (1 + n)) for n, item_id in enumerate(ids)]


def _evidence_entries(ci: ChannelInput) -> list[ChannelHit]:
    """The turns the best items stand on (004: "turns through the evidence of the best items"): the
    quoted turns of each item, in the items' order, each turn once."""
    items = best_items(ci)
    if not items:
        return []
    quoted: dict[str, list[str]] = defaultdict(list)
    for item_id, entry_id in (
        Evidence.objects.filter(agent_id=ci.agent_id, item_id__in=items, entry__isnull=False)
        .order_by("pk")
        .values_list("item_id", "entry_id")
    ):
        quoted[item_id].append(entry_id)
    ordered: list[str] = []
    for item_id in items:
        for entry_id in quoted.get(item_id, []):
            if entry_id not in ordered:
                ordered.append(entry_id)
    visible = entries_in_scope(ci, ordered)
    kept = [entry_id for entry_id in ordered if entry_id in visible][: ci.depth]
    return [ChannelHit(id=entry_id, score=1.0 / (1 + n)) for n, entry_id in enumerate(kept)]


# Weights by kind of question: the walk and the entities matter most where the answer is spread
# over turns (aggregate, general multi-hop); less for a dated question, which the time channels serve.
GRAPH_WEIGHTS = {"temporal": 0.4, "aggregate": 0.8, "update": 0.5, "preference": 0.6, "general": 0.7}
EVIDENCE_WEIGHTS = {"temporal": 0.8, "aggregate": 0.9, "update": 0.9, "preference": 0.9, "general": 0.9}

# Off unless SEARCH_GRAPH_CHANNELS is on (issue 26: on LoCoMo they cost ~2.5x a search's time for no
# R@10, the speakers becoming hubs of the walk); eval_retrieval --graph-channels measures them.
GATE = "SEARCH_GRAPH_CHANNELS"

register(Channel(name="entity", kind=ITEM, run=_entity_items, weights=GRAPH_WEIGHTS, default_weight=0.7, setting=GATE))
register(Channel(name="ppr", kind=ITEM, run=_ppr_items, weights=GRAPH_WEIGHTS, default_weight=0.7, setting=GATE))
register(Channel(name="ppr", kind=ENTRY, run=_ppr_entries, weights=GRAPH_WEIGHTS, default_weight=0.7, setting=GATE))
register(
    Channel(
        name="evidence", kind=ENTRY, run=_evidence_entries, weights=EVIDENCE_WEIGHTS, default_weight=0.9, setting=GATE
    )
)
