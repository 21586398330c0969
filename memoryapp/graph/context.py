"""The graph context of a turn (004 `includeGraphContext`, GraphContext): the entities the input
names and what the graph relates them to, within a few hops, as blocks a context build places or
cuts one node at a time (memoryapp.context.builder)."""

from __future__ import annotations

from dataclasses import dataclass, field

from memoryapp.graph.selectors import GraphEdge, GraphNode, entities_named_in, graph_neighbourhood
from memoryapp.items.rules import Scope
from memoryapp.models import Agent

DEFAULT_HOPS = 2
# Seeds read from one input, at most (a list of names must not seed the whole graph).
MAX_SEEDS = 8
MAX_GRAPH_NODES = 40


@dataclass
class NodeBlock:
    """A node and the edges joining it to the nodes before it: what placing it adds."""

    node: GraphNode
    edges: list[GraphEdge] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def edge_line(subject: str, predicate: str, obj: str) -> str:
    """An edge as the model reads it: "- Caroline -[friend of]-> Melanie"."""
    return f"- {subject} -[{predicate}]-> {obj}"


def graph_blocks(*, agent: Agent, scope: Scope, text: str, hops: int = DEFAULT_HOPS) -> list[NodeBlock]:
    """The blocks of the graph context of `text`, nearest node first.

    1. Seeds: the entities of the scope the text names (`entities_named_in`), at most MAX_SEEDS.
    2. Their neighbourhood within `hops` (`graph_neighbourhood`: visible active edges only).
    3. Each node, in hop order, gets the edges between it and the nodes before it, so the first
       seed's block is empty and every edge is in exactly one block: cutting a node takes the
       edges that reach it, never an edge whose two ends were both placed.
    """
    seeds = entities_named_in(agent=agent, scope=scope, text=text)[:MAX_SEEDS]
    if not seeds:
        return []
    found = graph_neighbourhood(
        agent=agent,
        scope=scope,
        seed_ids=[s.pk for s in seeds],
        hops=hops,
        max_nodes=MAX_GRAPH_NODES,
        with_evidence=True,
    )
    position = {node.id: index for index, node in enumerate(found.nodes)}
    names = {node.id: node.name for node in found.nodes}
    blocks = [NodeBlock(node=node) for node in found.nodes]
    for edge in found.edges:
        later = max(position[edge.subject_id], position[edge.object_id])
        block = blocks[later]
        block.edges.append(edge)
        block.lines.append(edge_line(names[edge.subject_id], edge.predicate, names[edge.object_id]))
    return blocks
