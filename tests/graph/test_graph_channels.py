"""The graph's search channels on small made-up threads: a question naming two people reaches the
turn linking them through the graph (the walk), the turns the best items stand on (evidence), items
by the entities named, the rule-based graph, and no channel reaching another agent's memory."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.graph.names import graph_from_names, names_in
from memoryapp.graph.services import entity_merge, relation_write
from memoryapp.items.rules import Scope
from memoryapp.items.services import item_write
from memoryapp.models import Entity, Entry, Relation, Thread
from memoryapp.search.graph_channels import personalized_pagerank
from memoryapp.search.retrieval import search
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory

ANA = Scope(user_id="u-ana")


@pytest.fixture(autouse=True)
def graph_channels_on(settings: Any) -> None:
    # The fused search runs the graph channels only with the setting on (issue 26); these tests are theirs.
    settings.SEARCH_GRAPH_CHANNELS = True


FILLER = [
    "The weather was lovely on Sunday.",
    "I finally repainted the kitchen.",
    "We should book the dentist soon.",
    "The new phone arrived yesterday.",
    "Traffic on the bridge was terrible.",
]


def _thread(caller: Caller) -> tuple[Thread, Entry]:
    """Filler turns, and one turn linking Carrie and Mel without the names the question uses."""
    thread = ThreadFactory(agent=caller.agent, external_id="t-people", user_id="u-ana")
    for text in FILLER:
        EntryFactory(thread=thread, role="user", content=text)
    linking = EntryFactory(thread=thread, role="user", content="Mel met Carrie at the pottery class years ago.")
    for text in FILLER:
        EntryFactory(thread=thread, role="assistant", content=f"Noted: {text.lower()}")
    relation_write(
        agent=caller.agent,
        subject="Mel",
        predicate="met",
        object="Carrie",
        scope=ANA,
        evidence=[{"entry_id": linking.id, "quote": "Mel met Carrie"}],
    )
    # The people are known by their full names too: Melanie, Caroline.
    for short, full in (("Mel", "Melanie"), ("Carrie", "Caroline")):
        item_write(
            agent=caller.agent,
            kind="fact",
            subject=full,
            attribute="name",
            value=full,
            trust="system",
            user_id="u-ana",
            evidence=[],
        )
        keep = Entity.objects.get(agent=caller.agent, name=full)
        entity_merge(agent=caller.agent, keep=keep, merged=Entity.objects.get(agent=caller.agent, name=short))
    return thread, linking


def _ids(outcome: Any) -> list[str]:
    return [hit.id for hit in outcome.hits]


def test_a_question_naming_two_people_reaches_the_turn_linking_them_through_the_graph(
    alice: Caller, bob: Caller
) -> None:
    thread, linking = _thread(alice)
    question = "How do Caroline and Melanie know each other?"
    keyword = search(agent=alice.agent, text=question, thread=thread, kinds=("entries",), method="keyword")
    assert linking.id not in _ids(keyword)  # no word of the question is in the turn
    walked = search(
        agent=alice.agent, text=question, thread=thread, kinds=("entries",), channels=("ppr",), neighbours=False
    )
    assert _ids(walked)[:1] == [linking.id]
    fused = search(agent=alice.agent, text=question, thread=thread, kinds=("entries",), limit=5)
    hit = next(h for h in fused.hits if h.id == linking.id)
    assert "ppr" in hit.channels
    # Bob's memory names the same people: nothing of it is reached from alice's, nor the other way.
    other, theirs = _thread(bob)
    assert theirs.id not in _ids(search(agent=alice.agent, text=question, thread=thread, kinds=("entries",)))
    assert linking.id not in _ids(search(agent=bob.agent, text=question, thread=other, kinds=("entries",)))


def test_turns_are_reached_through_the_evidence_of_the_best_items(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-pet", user_id="u-ana")
    for text in FILLER:
        EntryFactory(thread=thread, role="user", content=text)
    said = EntryFactory(thread=thread, role="user", content="We adopted Rex from the shelter last spring.")
    item_write(
        agent=alice.agent,
        kind="fact",
        subject="user",
        attribute="pet",
        value="a dog called Rex",
        trust="user",
        user_id="u-ana",
        evidence=[{"entry_id": said.id, "quote": "We adopted Rex"}],
    )
    question = "What kind of pet dog do I have?"
    assert said.id not in _ids(
        search(agent=alice.agent, text=question, thread=thread, kinds=("entries",), method="keyword")
    )
    found = search(
        agent=alice.agent, text=question, thread=thread, kinds=("entries",), channels=("evidence",), neighbours=False
    )
    assert _ids(found) == [said.id]
    # With items asked for too, the item channels' best item is what leads to the turn.
    both = search(agent=alice.agent, text=question, thread=thread, limit=5)
    assert said.id in _ids(both) and "evidence" in next(h for h in both.hits if h.id == said.id).channels
    # A turn the recall must not see (older-than cut, as a context build's history keeps it) is not reached.
    hidden = search(
        agent=alice.agent,
        text=question,
        thread=thread,
        kinds=("entries",),
        channels=("evidence",),
        before_seq=said.seq,
    )
    assert hidden.hits == []


def test_the_fused_search_runs_the_graph_channels_only_when_switched_on(alice: Caller, settings: Any) -> None:
    thread, linking = _thread(alice)
    question = "How do Caroline and Melanie know each other?"
    graph = {("entry", "ppr"), ("entry", "evidence"), ("item", "ppr"), ("item", "entity")}
    on = search(agent=alice.agent, text=question, thread=thread, limit=5)
    assert graph <= set(on.channel_lists) and linking.id in _ids(on)
    settings.SEARCH_GRAPH_CHANNELS = False
    off = search(agent=alice.agent, text=question, thread=thread, limit=5)
    assert not graph & set(off.channel_lists)
    # Asked for by name, a channel runs whatever the setting says (eval_retrieval scores it alone).
    alone = search(agent=alice.agent, text=question, thread=thread, kinds=("entries",), channels=("ppr",))
    assert set(alone.channel_lists) == {("entry", "ppr")} and _ids(alone)[:1] == [linking.id]


def test_items_about_the_entities_the_question_names_are_found_without_a_shared_word(alice: Caller) -> None:
    thread, _ = _thread(alice)
    found = search(
        agent=alice.agent, text="Tell me about Caroline", thread=thread, kinds=("items",), channels=("entity",)
    )
    assert [h.text for h in found.hits] == ["Caroline name: Caroline"]


def test_the_walk_keeps_its_mass_on_the_seeds_side_of_the_graph() -> None:
    graph = {"a": {"x"}, "x": {"a", "y"}, "y": {"x"}, "b": {"z"}, "z": {"b"}}
    rank = personalized_pagerank(graph, {"a": 1.0})
    assert rank["x"] > rank.get("y", 0) > 0 and "z" not in rank and abs(sum(rank.values()) - 1) < 1e-6


def test_the_rule_based_graph_links_a_speaker_to_the_names_their_turn_holds(alice: Caller) -> None:
    assert names_in("Hey Mel! Good to see you. I met Jon at Acme's office on Monday.") == ["Mel", "Jon", "Acme"]
    thread = ThreadFactory(agent=alice.agent, external_id="t-rules", user_id="")
    turn = EntryFactory(thread=thread, role="user", sender_name="Caroline", content="Yesterday I saw Jon and Gina.")
    EntryFactory(thread=thread, role="assistant", sender_name="Melanie", content="how nice.")
    assert graph_from_names(thread=thread) == 3
    assert graph_from_names(thread=thread) == 3  # run again: nothing twice
    edges = {(r.subject.name, r.predicate, r.object.name) for r in Relation.objects.filter(agent=alice.agent)}
    assert edges == {("Caroline", "mentions", "Jon"), ("Caroline", "mentions", "Gina"), ("Jon", "named with", "Gina")}
    assert set(Relation.objects.get(predicate="named with").evidence.values_list("entry_id", flat=True)) == {turn.id}
