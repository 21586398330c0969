"""The knowledge graph: edges extracted with the items, quotes that hold, merges, multi-hop traversal,
and the lineage cascades taking an edge with the turn it stands on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.errors import DomainError
from memoryapp.extraction.services import extraction_now
from memoryapp.forgetting.person import person_erase
from memoryapp.forgetting.services import entries_redact, entry_delete, thread_delete
from memoryapp.graph.selectors import entities_named_in, graph_neighbourhood
from memoryapp.graph.services import entity_merge, relation_write
from memoryapp.items.rules import Scope
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entity, Entry, Relation, RelationEvidence, Thread
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory

ANA = Scope(user_id="u-ana")


def _thread(caller: Caller, external_id: str = "t-g", user_id: str = "u-ana") -> tuple[Thread, list[Entry]]:
    thread = ThreadFactory(agent=caller.agent, external_id=external_id, user_id=user_id)
    said = [
        EntryFactory(thread=thread, role="user", content="Caroline is my sister and she works at Acme."),
        EntryFactory(thread=thread, role="assistant", content="Noted."),
        EntryFactory(thread=thread, role="user", content="Melanie met Caroline at the pottery class."),
    ]
    return thread, said


def _edge(subject: str, predicate: str, obj: str, *quotes: tuple[int, str]) -> dict[str, Any]:
    return {
        "kind": "relation",
        "subject": subject,
        "predicate": predicate,
        "object": obj,
        "evidence": [{"message": n, "quote": q} for n, q in quotes],
        "confidence": 0.9,
    }


def _names(relation: Relation) -> tuple[str, str, str]:
    return (relation.subject.name, relation.predicate, relation.object.name)


def test_extraction_writes_edges_that_stand_on_quotes_that_hold(alice: Caller) -> None:
    thread, said = _thread(alice)
    answer = json.dumps(
        [
            {
                "kind": "fact",
                "subject": "Caroline",
                "attribute": "employer",
                "value": "Acme",
                "evidence": [{"message": 1, "quote": "she works at Acme"}],
            },
            _edge("Caroline", "Sister of", "user", (1, "Caroline is my sister")),
            _edge("Caroline", "works at", "Acme", (1, "she works at Acme")),
            _edge("Melanie", "met", "Caroline", (3, "Melanie met Caroline")),
            _edge("Melanie", "knows", "Bob", (3, "Melanie knows Bob")),  # quote not in the message
            _edge("Melanie", "is", "melanie", (3, "Melanie met")),  # one entity twice
            _edge("Melanie", "", "Ana", (3, "Melanie met")),  # no predicate
        ]
    )
    with use_model(ScriptedModel([answer])):
        run, outcome = extraction_now(thread=thread)
    assert run.status == "succeeded" and outcome is not None
    assert outcome.items_written == 1 and outcome.relations_written == 3
    assert run.result["relations_written"] == 3 and outcome.items_left_out == 3
    edges = {_names(r) for r in Relation.objects.filter(agent=alice.agent)}
    assert edges == {
        ("Caroline", "sister of", "user"),
        ("Caroline", "works at", "Acme"),
        ("Melanie", "met", "Caroline"),
    }
    # The edge's entity is the item's: one Caroline, in the thread's person's scope.
    caroline = Entity.objects.get(agent=alice.agent, name="Caroline")
    assert caroline.user_id == "u-ana" and caroline.items.count() == 1
    met = Relation.objects.get(agent=alice.agent, predicate="met")
    assert met.status == "suggested"  # agents start in shadow mode: a reviewer lets it in
    quote = RelationEvidence.objects.get(relation=met)
    assert quote.entry_id == said[2].id and quote.status == "verified" and quote.quote == "Melanie met Caroline"
    assert AuditRecord.objects.filter(action="relation.written", agent_id=alice.agent.pk).count() == 3


def test_a_repeated_edge_merges_its_quotes_and_bad_input_is_refused(alice: Caller) -> None:
    _, said = _thread(alice)
    first = relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="friend of",
        object="Melanie",
        scope=ANA,
        evidence=[{"entry_id": said[2].id, "quote": "Melanie met Caroline"}],
    )
    again = relation_write(
        agent=alice.agent,
        subject="caroline",
        predicate="Friend  of",
        object="MELANIE",
        scope=ANA,
        evidence=[{"entry_id": said[0].id, "quote": "Caroline is my sister"}],
    )
    assert again.pk == first.pk and again.status == "active" and again.verified
    assert RelationEvidence.objects.filter(relation=first).count() == 2
    for bad, field in (
        ({"subject": "", "predicate": "x", "object": "y"}, "subject"),
        ({"subject": "Ana", "predicate": "x", "object": " ana "}, "object"),
        ({"subject": "Ana", "predicate": "x" * 201, "object": "Bo"}, "predicate"),
    ):
        with pytest.raises(DomainError) as caught:
            relation_write(agent=alice.agent, scope=ANA, **bad)
        assert caught.value.field == field
    assert Relation.objects.filter(agent=alice.agent).count() == 1


def _chain(caller: Caller) -> tuple[Thread, list[Entry]]:
    """Ana -[sister of]-> Caroline -[friend of]-> Melanie -[works at]-> Acme, each on its own turn."""
    thread = ThreadFactory(agent=caller.agent, external_id="t-chain", user_id="u-ana")
    turns = [
        EntryFactory(thread=thread, role="user", content="Ana is the sister of Caroline."),
        EntryFactory(thread=thread, role="user", content="Caroline and Melanie are friends."),
        EntryFactory(thread=thread, role="user", content="Melanie works at Acme."),
    ]
    for (head, predicate, tail), turn in zip(
        (("Ana", "sister of", "Caroline"), ("Caroline", "friend of", "Melanie"), ("Melanie", "works at", "Acme")),
        turns,
        strict=True,
    ):
        relation_write(
            agent=caller.agent,
            subject=head,
            predicate=predicate,
            object=tail,
            scope=ANA,
            evidence=[{"entry_id": turn.id, "quote": turn.text}],
        )
    return thread, turns


def test_traversal_reaches_nodes_hop_by_hop_and_names_are_read_from_the_text(alice: Caller, bob: Caller) -> None:
    _chain(alice)
    _chain(bob)
    named = entities_named_in(agent=alice.agent, scope=ANA, text="What does Caroline's friend do?")
    assert [e.name for e in named] == ["Caroline"]
    assert all(e.agent_id == alice.agent.pk for e in named)
    one = graph_neighbourhood(agent=alice.agent, scope=ANA, seed_ids=[named[0].pk], hops=1)
    assert sorted((n.name, n.hop) for n in one.nodes) == [("Ana", 1), ("Caroline", 0), ("Melanie", 1)]
    two = graph_neighbourhood(agent=alice.agent, scope=ANA, seed_ids=[named[0].pk], hops=2, with_evidence=True)
    assert {(n.name, n.hop) for n in two.nodes} >= {("Acme", 2)}
    assert {e.predicate: e.hop for e in two.edges} == {"sister of": 1, "friend of": 1, "works at": 2}
    assert all(q["quote"] for e in two.edges for q in e.evidence)
    # Another person's scope does not see Ana's graph; bob's entities are not reachable from alice's.
    assert entities_named_in(agent=alice.agent, scope=Scope(user_id="u-bo"), text="Caroline") == []
    bob_ids = set(Entity.objects.filter(agent=bob.agent).values_list("pk", flat=True))
    assert graph_neighbourhood(agent=alice.agent, scope=ANA, seed_ids=bob_ids, hops=3).nodes == []


def test_deleting_the_quoted_turn_takes_the_edge_and_redacting_trims_it(alice: Caller) -> None:
    thread, turns = _chain(alice)
    # A second quote keeps "friend of" standing when one of its turns goes.
    extra = EntryFactory(thread=thread, role="user", content="Melanie is a friend of Caroline.")
    relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="friend of",
        object="Melanie",
        scope=ANA,
        evidence=[{"entry_id": extra.id, "quote": "friend of Caroline"}],
    )
    entry_delete(entry=Entry.objects.get(pk=turns[2].pk), keep_replies=True, actor="test")
    assert not Relation.objects.filter(agent=alice.agent, predicate="works at").exists()
    # Acme stood only on that edge: it goes; Melanie is still an end of "friend of".
    assert set(Entity.objects.filter(agent=alice.agent).values_list("name", flat=True)) == {
        "Ana",
        "Caroline",
        "Melanie",
    }
    audit = AuditRecord.objects.filter(action="lineage.forget", agent_id=alice.agent.pk).latest("pk")
    assert audit.details["edges_purged"] == 1
    entries_redact(entry=Entry.objects.get(pk=turns[1].pk), keep_replies=True, actor="test")
    friend = Relation.objects.get(agent=alice.agent, predicate="friend of")
    assert list(RelationEvidence.objects.filter(relation=friend).values_list("entry_id", flat=True)) == [extra.pk]
    assert friend.verified
    thread_delete(thread=Thread.objects.get(pk=thread.pk), actor="test")
    assert not Relation.objects.filter(agent=alice.agent).exists()
    assert not RelationEvidence.objects.filter(agent=alice.agent).exists()


def test_erasing_a_person_takes_the_edges_of_their_scope(alice: Caller) -> None:
    _chain(alice)
    other = ThreadFactory(agent=alice.agent, external_id="t-team", user_id="")
    turn = EntryFactory(thread=other, role="user", content="Melanie works with Bruno.")
    relation_write(
        agent=alice.agent,
        subject="Melanie",
        predicate="works with",
        object="Bruno",
        evidence=[{"entry_id": turn.id, "quote": turn.text}],
    )
    person_erase(user_id="u-ana", agent_ids=[alice.agent.pk], actor="test")
    assert list(Relation.objects.filter(agent=alice.agent).values_list("predicate", flat=True)) == ["works with"]
    assert not RelationEvidence.objects.filter(agent=alice.agent, relation__user_id="u-ana").exists()


def test_merging_entities_keeps_their_edges_and_quotes(alice: Caller) -> None:
    thread, turns = _chain(alice)
    mel = EntryFactory(thread=thread, role="user", content="Mel is a friend of Caroline.")
    relation_write(
        agent=alice.agent,
        subject="Caroline",
        predicate="friend of",
        object="Mel",
        scope=ANA,
        evidence=[{"entry_id": mel.id, "quote": "Mel is a friend of Caroline"}],
    )
    keep = Entity.objects.get(agent=alice.agent, name="Melanie")
    merged = Entity.objects.get(agent=alice.agent, name="Mel")
    entity_merge(agent=alice.agent, keep=keep, merged=merged, actor="test")
    keep.refresh_from_db()
    assert keep.aliases == ["Mel"] and not Entity.objects.filter(pk=merged.pk).exists()
    friend = Relation.objects.get(agent=alice.agent, predicate="friend of")
    assert friend.object_id == keep.pk
    assert set(RelationEvidence.objects.filter(relation=friend).values_list("entry_id", flat=True)) == {
        turns[1].pk,
        mel.pk,
    }
    assert [e.name for e in entities_named_in(agent=alice.agent, scope=ANA, text="Where does Mel work?")] == ["Melanie"]
