"""The graph context partition (004 `includeGraphContext`): the edges around the entities the input
names, nodes and edges counted, nodes cut past the partition's room, scope and agent kept apart."""

from __future__ import annotations

from memoryapp.graph.services import relation_write
from memoryapp.items.rules import Scope
from tests.graph.test_graph import _chain
from tests.kit.api import Caller, build_context
from tests.kit.factories import EntryFactory, ThreadFactory


def test_graph_context_sends_the_edges_around_the_named_entities_and_cuts_nodes_past_its_room(
    alice: Caller, mallory: Caller
) -> None:
    _chain(alice)
    answered = build_context(
        alice,
        "t-chain",
        max_tokens=2000,
        strategy="recent",
        current_input="What do you know about Caroline?",
        include_graph_context=True,
    )
    graph = answered["graph"]
    assert {e["predicate"] for e in graph["edges"]} == {"sister of", "friend of", "works at"}
    assert {n["name"] for n in graph["nodes"]} == {"Ana", "Caroline", "Melanie", "Acme"}
    assert answered["metadata"]["graph_nodes_included"] == 4 and answered["metadata"]["graph_edges_included"] == 3
    assert "Graph context:\n- Ana -[sister of]-> Caroline" in answered["memory_context"]
    assert answered["partitions"]["graph"] > 0 and answered["dropped"]["graph_nodes"] == []
    # One hop: Acme is not reached.
    near = build_context(
        alice, "t-chain", max_tokens=2000, current_input="Caroline?", include_graph_context=True, graph_hops=1
    )
    assert {n["name"] for n in near["graph"]["nodes"]} == {"Ana", "Caroline", "Melanie"}
    # A budget that leaves room for one node: the farther ones are cut, in dropped with their blocks.
    tight = build_context(
        alice,
        "t-chain",
        max_tokens=400,
        strategy="recent",
        current_input="Caroline?",
        include_graph_context=True,
        partitions={"facts": 0, "recall": 0.06},
    )
    cut = {n["name"] for n in tight["dropped"]["graph_nodes"]}
    assert cut and "Acme" in cut
    assert {b["source_id"] for b in tight["dropped"]["blocks"] if b["partition"] == "graph"} == {
        n["id"] for n in tight["dropped"]["graph_nodes"]
    }
    assert tight["metadata"]["graph_edges_included"] < 3
    # Without the flag there is no graph context; another agent's thread is a 404.
    plain = build_context(alice, "t-chain", max_tokens=2000, current_input="Caroline?")
    assert plain["graph"] is None and "Graph context" not in (plain["memory_context"] or "")
    response = mallory.client.post(
        "/api/v1/threads/t-chain/context",
        {"max_tokens": 2000, "current_input": "Caroline?", "include_graph_context": True},
        format="json",
    )
    assert response.status_code == 404
    bad = alice.client.post("/api/v1/threads/t-chain/context", {"max_tokens": 2000, "graph_hops": 9}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "graph_hops"


def test_a_suggested_edge_or_another_persons_edge_is_not_in_the_graph_context(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-bo", user_id="u-bo")
    turn = EntryFactory(thread=thread, role="user", content="Caroline owes Bruno money.")
    relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="owes",
        object="Bruno",
        scope=Scope(user_id="u-bo"),
        evidence=[{"entry_id": turn.id, "quote": turn.text}],
    )
    relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="likes",
        object="Bruno",
        scope=Scope(user_id="u-bo"),
        evidence=[{"entry_id": turn.id, "quote": turn.text}],
        shadow=True,
    )
    _chain(alice)
    answered = build_context(alice, "t-chain", max_tokens=2000, current_input="Caroline?", include_graph_context=True)
    assert "Bruno" not in answered["memory_context"]
    bo = build_context(alice, "t-bo", max_tokens=2000, current_input="Caroline?", include_graph_context=True)
    assert [e["predicate"] for e in bo["graph"]["edges"]] == ["owes"]
