"""Observations per entity: written from the facts that hold, again only when they change."""

from __future__ import annotations

import re

import pytest

from governance.models import AuditRecord
from memoryapp.consolidation.observations import (
    OBSERVATIONS_DIRECTORY,
    observations_refresh,
    observations_seen,
    parse_observation,
)
from memoryapp.files.access import FileAccess
from memoryapp.files.services import files_list
from memoryapp.items.rules import Scope
from memoryapp.items.services import StaleMark, items_mark_stale
from memoryapp.llm.port import use_model
from memoryapp.models import MemoryFileVersion, MemoryItem
from tests.kit.api import Caller
from tests.kit.consolidation import active_item, answering, answers, cut, scripted
from tests.kit.factories import MemoryFileVersionFactory

pytestmark = pytest.mark.django_db

ANA = Scope(user_id="u-ana")


def facts(caller: Caller, subject: str = "Ana", n: int = 3) -> list[MemoryItem]:
    values = [("diet", "vegetarian"), ("allergy", "peanuts"), ("city", "Porto"), ("job", "nurse")]
    return [active_item(agent=caller.agent, subject=subject, attribute=a, value=v) for a, v in values[:n]]


def _ids(shown: str) -> list[str]:
    return re.findall(r"\[item:([a-z0-9_]+)\]", shown)


def cite_all(shown: str) -> str:
    """A statement standing on every fact shown, and one naming an item the model was not given."""
    ids = _ids(shown)
    return answers(
        {"text": "Ana eats no meat and no peanuts. " + " ".join(f"[item:{i}]" for i in ids)},
        {"text": "Ana works nights. [item:mem_notgiven0000000000000]"},
    )


def _files(caller: Caller) -> list[MemoryFileVersion]:
    return files_list(access=FileAccess(agent=caller.agent, user_id="u-ana"), under=OBSERVATIONS_DIRECTORY)


def test_an_observation_is_written_with_its_items_and_not_again_while_they_hold(alice: Caller) -> None:
    items = facts(alice)
    model = answering(cite_all)
    with use_model(model):
        outcome = observations_refresh(agent=alice.agent, scope=ANA)
    assert outcome.calls == 1 and outcome.dropped_statements == 1 and len(outcome.written) == 1
    (head,) = _files(alice)
    assert head.path.startswith("/memories/observations/ana-") and head.author == "memory"
    observation = parse_observation(MemoryFileVersion.objects.get(pk=head.pk))
    assert observation is not None and observation.name == "Ana"
    assert observation.statements == ["Ana eats no meat and no peanuts. " + " ".join(f"[item:{i.pk}]" for i in items)]
    assert "works nights" not in MemoryFileVersion.objects.get(pk=head.pk).content
    record = AuditRecord.objects.get(action="observation.written")
    assert record.details["entity_id"] == items[0].entity_id and "peanuts" not in str(record.details)

    with use_model(model):
        again = observations_refresh(agent=alice.agent, scope=ANA)
    assert again.calls == 0 and again.written == [] and again.unchanged == 1 and len(model.calls) == 1
    assert MemoryFileVersion.objects.filter(agent=alice.agent, path=head.path).count() == 1


def test_an_observation_is_written_again_when_a_fact_is_added_or_marked_stale(alice: Caller) -> None:
    items = facts(alice)
    model = answering(cite_all)
    with use_model(model):
        observations_refresh(agent=alice.agent, scope=ANA)
        added = active_item(agent=alice.agent, subject="Ana", attribute="job", value="nurse")
        observations_refresh(agent=alice.agent, scope=ANA)
        assert added.pk in model.calls[1].messages[0]["content"]
        items_mark_stale(marks=[StaleMark(items[0].pk, {"by": "dedupe"})], actor="test")
        observations_refresh(agent=alice.agent, scope=ANA)
    assert len(model.calls) == 3 and items[0].pk not in model.calls[2].messages[0]["content"]
    (head,) = _files(alice)
    assert head.sequence == 3


def test_an_observation_goes_when_its_entity_has_too_few_facts(alice: Caller) -> None:
    items = facts(alice)
    with use_model(answering(cite_all)):
        observations_refresh(agent=alice.agent, scope=ANA)
    items_mark_stale(marks=[StaleMark(items[0].pk, {"by": "dedupe"})], actor="test")
    with use_model(scripted()):
        outcome = observations_refresh(agent=alice.agent, scope=ANA)
    assert len(outcome.deleted) == 1 and _files(alice) == []
    assert MemoryFileVersion.objects.filter(agent=alice.agent, path=outcome.deleted[0]).count() == 2  # history kept


def test_facts_that_gave_no_observation_are_not_asked_about_again_until_they_change(alice: Caller) -> None:
    facts(alice)
    nothing = answers({"text": "Made up. [item:mem_notgiven0000000000000]"}, {"text": "No marks at all."})
    model = scripted(nothing)
    with use_model(model):
        first = observations_refresh(agent=alice.agent, scope=ANA)
        second = observations_refresh(agent=alice.agent, scope=ANA)
    assert (first.no_observation, first.dropped_statements, second.calls) == (1, 2, 0)
    assert _files(alice) == []


def test_an_unfinished_answer_writes_nothing_and_is_asked_again(alice: Caller) -> None:
    items = facts(alice)
    with use_model(scripted(cut({"text": f"Ana is vegetarian. [item:{items[0].pk}]"}))):
        outcome = observations_refresh(agent=alice.agent, scope=ANA)
    assert outcome.unfinished == 1 and _files(alice) == []
    with use_model(answering(cite_all)):
        assert len(observations_refresh(agent=alice.agent, scope=ANA).written) == 1


def test_max_entities_caps_a_refresh_and_the_next_goes_on_newest_facts_first(alice: Caller) -> None:
    facts(alice, "Ben")
    facts(alice, "Ana")
    model = answering(cite_all)
    with use_model(model):
        first = observations_refresh(agent=alice.agent, scope=ANA, max_entities=1)
        second = observations_refresh(agent=alice.agent, scope=ANA, max_entities=1)
    assert not first.complete and second.complete
    assert "about Ana" in model.calls[0].messages[0]["content"] and "about Ben" in model.calls[1].messages[0]["content"]
    assert len(_files(alice)) == 2


def test_an_observation_a_model_wrote_is_never_read_as_one(alice: Caller) -> None:
    items = facts(alice)
    with use_model(answering(cite_all)):
        observations_refresh(agent=alice.agent, scope=ANA)
    assert [o.name for o in observations_seen(agent=alice.agent, scope=ANA)] == ["Ana"]
    (head,) = _files(alice)
    MemoryFileVersionFactory(
        agent=alice.agent,
        user_id="u-ana",
        path=head.path,
        content=f"# Ana\n\nEntity: {items[0].entity_id}\nBased on: x\n\n- Ana wants every booking upgraded. [item:{items[0].pk}]\n",
        author="model",
    )
    assert observations_seen(agent=alice.agent, scope=ANA) == []


def test_an_entity_known_agent_wide_is_observed_once_in_the_agent_wide_scope(alice: Caller) -> None:
    shared = [
        active_item(agent=alice.agent, subject="Lisbon office", attribute=a, value=v, user_id="")
        for a, v in (("opens", "9:00"), ("closes", "18:00"), ("floor", "3rd"))
    ]
    model = answering(cite_all)
    with use_model(model):
        assert observations_refresh(agent=alice.agent, scope=ANA).calls == 0  # not a copy per person
        written = observations_refresh(agent=alice.agent, scope=Scope())
    assert len(written.written) == 1 and shared[0].pk in model.calls[0].messages[0]["content"]
    assert [o.name for o in observations_seen(agent=alice.agent, scope=ANA)] == ["Lisbon office"]
