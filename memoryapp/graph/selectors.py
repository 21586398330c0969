"""Reads of the knowledge graph: the edges a scope sees, the entities a text names, multi-hop
traversal (004 "Knowledge Graph - Entity-relationship memory with multi-hop traversal").

Every read starts from the agent and the scope (`visible_q`: edges and entities of no scope or of
the reader's own), so one agent never reaches another's graph.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet

from memoryapp.items.rules import Scope, normalized_name, visible_q
from memoryapp.models import Agent, Entity, Relation, RelationEvidence
from memoryapp.models.choices import ItemStatus

# Traversal stops after this many hops and this many nodes (a hub must not pull the whole graph).
MAX_HOPS = 3
MAX_NODES = 200
_WORD = re.compile(r"[\w'-]+", re.UNICODE)


def _visible(scope: Scope | None) -> Q:
    """What a scope sees; None: the whole agent (a search of every thread)."""
    if scope is None:
        return Q()
    return visible_q(user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id)


def entities_visible(*, agent: Agent, scope: Scope | None) -> QuerySet[Entity]:
    return Entity.objects.filter(_visible(scope), agent=agent)


def relations_visible(
    *, agent: Agent, scope: Scope | None, statuses: Collection[str] = (ItemStatus.ACTIVE,)
) -> QuerySet[Relation]:
    """The edges a scope sees (active ones unless asked otherwise)."""
    return Relation.objects.filter(_visible(scope), agent=agent, status__in=list(statuses))


def _padded_words(text: str) -> str:
    return " " + " ".join(w.lower() for w in _WORD.findall(text or "")) + " "


def names_of(entity: Entity) -> list[str]:
    """An entity's name and other names, each normalised (what a text is matched on)."""
    names = [normalized_name(entity.name)]
    names += [normalized_name(a) for a in entity.aliases or [] if isinstance(a, str)]
    return [n for n in names if n]


def entities_named_in(*, agent: Agent, scope: Scope | None, text: str) -> list[Entity]:
    """The entities of the scope whose name or other name the text holds as whole words ("Caroline",
    "caroline's" aside from the possessive), longest name first. Names are read in Python: with
    encryption on they are sealed, so no SQL can compare them."""
    said = _padded_words(re.sub(r"'s\b", "", text or "", flags=re.IGNORECASE))
    found: list[tuple[int, Entity]] = []
    for entity in entities_visible(agent=agent, scope=scope).only(
        "id", "name", "aliases", "agent_id", "user_id", "thread_id", "project_id"
    ):
        lengths = [
            len(n) for n in names_of(entity) if f" {_padded_words(n).strip()} " in said and _padded_words(n).strip()
        ]
        if lengths:
            found.append((max(lengths), entity))
    found.sort(key=lambda pair: (-pair[0], pair[1].pk))
    return [entity for _, entity in found]


@dataclass
class GraphEdge:
    id: str
    subject_id: str
    predicate: str
    object_id: str
    confidence: float
    hop: int
    evidence: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "subject_id": self.subject_id,
            "predicate": self.predicate,
            "object_id": self.object_id,
            "confidence": self.confidence,
            "hop": self.hop,
            "evidence": self.evidence,
        }


@dataclass
class GraphNode:
    id: str
    name: str
    aliases: list[str]
    hop: int  # 0: a seed (named by the input), then the hops it took to reach it

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "aliases": self.aliases, "hop": self.hop}


@dataclass
class Neighbourhood:
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)


def graph_neighbourhood(
    *,
    agent: Agent,
    scope: Scope,
    seed_ids: Iterable[str],
    hops: int = 2,
    max_nodes: int = MAX_NODES,
    with_evidence: bool = False,
) -> Neighbourhood:
    """The nodes and edges within `hops` of the seeds, breadth first (one query per hop).

    1. Hop 0: the seeds, as the scope sees them.
    2. Each hop reads the visible active edges leaving or entering the frontier; their other ends
       not met yet are the next frontier (until `max_nodes`).
    3. Nodes come out nearest first (hop, then the order found); edges with the hop that found them.
    """
    hops = max(0, min(int(hops), MAX_HOPS))
    seeds = list(dict.fromkeys(seed_ids))
    visible = entities_visible(agent=agent, scope=scope)
    hop_of: dict[str, int] = {e: 0 for e in visible.filter(pk__in=seeds).values_list("pk", flat=True)}
    order = [s for s in seeds if s in hop_of]
    edges: dict[str, GraphEdge] = {}
    frontier = list(order)
    edge_rows = relations_visible(agent=agent, scope=scope)
    for hop in range(1, hops + 1):
        if not frontier or len(order) >= max_nodes:
            break
        rows = (
            edge_rows.filter(Q(subject_id__in=frontier) | Q(object_id__in=frontier))
            .order_by("-confidence", "pk")
            .values_list("id", "subject_id", "predicate", "object_id", "confidence")
        )
        following: list[str] = []
        for edge_id, head, predicate, tail, confidence in rows:
            if edge_id in edges:
                continue
            for end in (head, tail):
                if end not in hop_of and len(order) < max_nodes:
                    hop_of[end] = hop
                    order.append(end)
                    following.append(end)
            if head in hop_of and tail in hop_of:
                edges[edge_id] = GraphEdge(edge_id, head, predicate, tail, confidence, hop)
        frontier = following
    names = {e.pk: e for e in visible.filter(pk__in=order)}
    nodes = [
        GraphNode(
            id=pk,
            name=names[pk].name,
            aliases=[a for a in names[pk].aliases or [] if isinstance(a, str)],
            hop=hop_of[pk],
        )
        for pk in order
        if pk in names
    ]
    kept = [e for e in edges.values() if e.subject_id in names and e.object_id in names]
    if with_evidence and kept:
        quotes: dict[str, list[dict[str, Any]]] = {}
        for relation_id, entry_id, quote in (
            RelationEvidence.objects.filter(agent=agent, relation_id__in=[e.id for e in kept])
            .order_by("pk")
            .values_list("relation_id", "entry_id", "quote")
        ):
            quotes.setdefault(relation_id, []).append({"entry_id": entry_id, "quote": quote})
        for edge in kept:
            edge.evidence = quotes.get(edge.id, [])
    return Neighbourhood(nodes=nodes, edges=kept)


def edge_entries(*, agent: Agent, relation_ids: Collection[str]) -> dict[str, list[str]]:
    """The entries each edge's quotes stand on (evidence-to-turn), oldest quote first."""
    found: dict[str, list[str]] = {}
    for relation_id, entry_id in (
        RelationEvidence.objects.filter(agent=agent, relation_id__in=list(relation_ids), entry__isnull=False)
        .order_by("pk")
        .values_list("relation_id", "entry_id")
    ):
        found.setdefault(relation_id, []).append(entry_id)
    return found
