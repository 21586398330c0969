"""Dedupe: what repeats or is contradicted goes stale (never deleted), as code allows the model's groups."""

from __future__ import annotations

from datetime import timedelta

import pytest

from governance.models import AuditRecord
from memoryapp.consolidation.dedupe import dedupe_subjects, scope_dedupe
from memoryapp.errors import Conflict
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import context_facts
from memoryapp.items.services import item_stale_undo
from memoryapp.llm.port import use_model
from memoryapp.models import Entity, MemoryItem
from tests.kit.api import Caller
from tests.kit.consolidation import active_item, answering, answers, cut, scripted

pytestmark = pytest.mark.django_db

ANA = Scope(user_id="u-ana")


def _status(*items: MemoryItem) -> list[str]:
    return [MemoryItem.objects.get(pk=i.pk).status for i in items]


def test_a_repeat_goes_stale_with_why_and_is_not_deleted(alice: Caller) -> None:
    diet = active_item(agent=alice.agent, attribute="diet", value="vegetarian")
    food = active_item(agent=alice.agent, attribute="food", value="vegetarian, no meat")
    model = scripted(answers({"keep": diet.pk, "drop": [food.pk], "reason": "duplicate"}))
    with use_model(model):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert [(s.item_id, s.kept_id, s.reason) for s in outcome.stale] == [(food.pk, diet.pk, "duplicate")]
    assert outcome.complete and outcome.calls == 1
    shown = model.calls[0].messages[0]["content"]
    assert diet.pk in shown and food.pk in shown and "Ana" in shown
    food = MemoryItem.objects.get(pk=food.pk)
    assert food.status == "stale"
    assert {k: food.metadata["stale_because"][k] for k in ("by", "reason", "kept")} == {
        "by": "dedupe",
        "reason": "duplicate",
        "kept": diet.pk,
    }
    assert [f.item_id for f in context_facts(agent=alice.agent, user_id="u-ana")] == [diet.pk]
    record = AuditRecord.objects.get(action="items.marked_stale")
    assert record.details["item_ids"] == [food.pk] and record.details["kept_ids"] == [diet.pk]
    assert "vegetarian" not in str(record.details)


def test_a_group_naming_an_item_it_was_not_shown_is_refused_whole(alice: Caller) -> None:
    a = active_item(agent=alice.agent, attribute="diet", value="vegetarian")
    b = active_item(agent=alice.agent, attribute="food", value="vegetarian")
    elsewhere = active_item(agent=alice.agent, attribute="meals", value="vegetarian", user_id="u-ben")
    model = scripted(
        answers(
            {"keep": a.pk, "drop": [b.pk, "mem_0000000000made-up-id00"], "reason": "duplicate"},
            {"keep": a.pk, "drop": [elsewhere.pk], "reason": "duplicate"},
        )
    )
    with use_model(model):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert outcome.stale == [] and _status(a, b, elsewhere) == ["active"] * 3
    assert [r["why"] for r in outcome.refused] == ["names an item it was not shown"] * 2
    assert elsewhere.pk not in model.calls[0].messages[0]["content"]  # exactly the scope: u-ben's is not shown


def test_an_item_is_never_dropped_for_a_less_trusted_one(alice: Caller) -> None:
    said_by_system = active_item(agent=alice.agent, attribute="diet", value="vegetarian")
    said_by_model = active_item(agent=alice.agent, attribute="food", value="vegetarian", trust="model")
    also_model = active_item(agent=alice.agent, attribute="meals", value="vegetarian", trust="model")
    model = scripted(
        answers({"keep": said_by_model.pk, "drop": [said_by_system.pk, also_model.pk], "reason": "duplicate"})
    )
    with use_model(model):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert [s.item_id for s in outcome.stale] == [also_model.pk]
    assert _status(said_by_system, said_by_model, also_model) == ["active", "active", "stale"]
    assert outcome.refused == [
        {"why": "more trusted than the item kept", "item": said_by_system.pk, "keep": said_by_model.pk}
    ]


def test_a_contradiction_drops_only_items_said_before_the_one_kept(alice: Caller) -> None:
    older = active_item(agent=alice.agent, attribute="city", value="Lisbon")
    newer = active_item(agent=alice.agent, attribute="lives in", value="Porto")
    wrong_way = scripted(answers({"keep": older.pk, "drop": [newer.pk], "reason": "contradiction"}))
    with use_model(wrong_way):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert outcome.stale == [] and outcome.refused[0]["why"] == "said after the item kept"
    assert _status(older, newer) == ["active", "active"]
    with use_model(scripted(answers({"keep": newer.pk, "drop": [older.pk], "reason": "contradiction"}))):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert [(s.item_id, s.reason) for s in outcome.stale] == [(older.pk, "contradiction")]


def test_an_unfinished_answer_stops_the_pass_before_its_subjects(alice: Caller) -> None:
    a = active_item(agent=alice.agent, attribute="diet", value="vegetarian")
    b = active_item(agent=alice.agent, attribute="food", value="vegetarian")
    with use_model(scripted(cut({"keep": a.pk, "drop": [b.pk], "reason": "duplicate"}))):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert (outcome.stale, outcome.complete, outcome.unfinished, outcome.through) == ([], False, True, None)
    assert _status(a, b) == ["active", "active"]
    with use_model(scripted("Sure, here are the groups: none needed.")):  # no array at all
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert outcome.unfinished and not outcome.complete


def _three_subjects(alice: Caller) -> dict[str, tuple[MemoryItem, MemoryItem]]:
    pairs = {}
    for name in ("Ana", "Ben", "Cy"):
        first = active_item(agent=alice.agent, subject=name, attribute="diet", value="vegetarian")
        second = active_item(agent=alice.agent, subject=name, attribute="food", value="vegetarian")
        pairs[name] = (first, second)
    return pairs


def _drop_seconds(pairs: dict[str, tuple[MemoryItem, MemoryItem]]):
    def reply(shown: str) -> str:
        groups = [
            {"keep": first.pk, "drop": [second.pk], "reason": "duplicate"}
            for first, second in pairs.values()
            if first.pk in shown
        ]
        return answers(*groups)

    return reply


def test_max_subjects_stops_a_pass_and_through_lets_the_next_go_on(alice: Caller) -> None:
    pairs = _three_subjects(alice)
    model = answering(_drop_seconds(pairs))
    with use_model(model):
        first = scope_dedupe(agent=alice.agent, scope=ANA, max_subjects=2)
        assert not first.complete and first.subjects == 2
        assert first.through == MemoryItem.objects.get(pk=pairs["Ben"][1].pk).recorded_at
        assert "Cy" not in model.calls[0].messages[0]["content"]
        second = scope_dedupe(agent=alice.agent, scope=ANA, since=first.through, since_key=first.through_key)
    assert second.complete and second.subjects == 1
    assert "Ana" not in model.calls[1].messages[0]["content"]
    assert sorted(s.item_id for s in first.stale + second.stale) == sorted(p[1].pk for p in pairs.values())


def test_max_changes_applies_whole_groups_and_the_next_pass_goes_on(alice: Caller) -> None:
    pairs = _three_subjects(alice)
    model = answering(_drop_seconds(pairs))
    with use_model(model):
        first = scope_dedupe(agent=alice.agent, scope=ANA, max_changes=1)
        assert [s.item_id for s in first.stale] == [pairs["Ana"][1].pk]
        assert not first.complete and first.through == MemoryItem.objects.get(pk=pairs["Ana"][1].pk).recorded_at
        second = scope_dedupe(
            agent=alice.agent, scope=ANA, since=first.through, since_key=first.through_key, max_changes=1
        )
        third = scope_dedupe(
            agent=alice.agent, scope=ANA, since=second.through, since_key=second.through_key, max_changes=1
        )
    assert [s.item_id for s in second.stale] == [pairs["Ben"][1].pk]
    assert [s.item_id for s in third.stale] == [pairs["Cy"][1].pk] and third.complete


def test_since_looks_only_at_subjects_with_an_item_recorded_after_it(alice: Caller) -> None:
    pairs = _three_subjects(alice)
    ben_newest = MemoryItem.objects.get(pk=pairs["Ben"][1].pk).recorded_at
    subjects = dedupe_subjects(agent=alice.agent, scope=ANA, since=ben_newest)
    assert [s.name for s in subjects] == ["Cy"]
    later = active_item(agent=alice.agent, subject="Ana", attribute="allergy", value="peanuts")
    subjects = dedupe_subjects(agent=alice.agent, scope=ANA, since=ben_newest)
    assert [s.name for s in subjects] == ["Cy", "Ana"]  # the subject whose newest item is oldest first
    assert later.pk in {i.pk for i in MemoryItem.objects.filter(entity__name="Ana")}
    assert dedupe_subjects(agent=alice.agent, scope=ANA, since=ben_newest + timedelta(days=1)) == []


def test_other_names_join_subjects_and_a_merge_across_names_writes_one(alice: Caller) -> None:
    ana = active_item(agent=alice.agent, subject="Ana", attribute="diet", value="vegetarian")
    silva = active_item(agent=alice.agent, subject="Ana Silva", attribute="food", value="vegetarian")
    assert len(dedupe_subjects(agent=alice.agent, scope=ANA)) == 2
    with use_model(scripted(answers({"keep": ana.pk, "drop": [silva.pk], "reason": "duplicate"}))):
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert outcome.aliases_written == 1
    assert Entity.objects.get(pk=ana.entity_id).aliases == ["Ana Silva"]
    again = active_item(agent=alice.agent, subject="Ana Silva", attribute="city", value="Porto")
    (subject,) = dedupe_subjects(agent=alice.agent, scope=ANA)
    assert {e.pk for e in subject.entities} == {ana.entity_id, again.entity_id}
    assert subject.name == "Ana Silva" and subject.aliases == ["Ana"]
    assert AuditRecord.objects.get(action="entity.aliases_added").subject == ana.entity_id


def test_an_undone_mark_brings_the_item_back_and_no_pass_drops_it_again(alice: Caller) -> None:
    a = active_item(agent=alice.agent, attribute="diet", value="vegetarian")
    b = active_item(agent=alice.agent, attribute="food", value="vegetarian")
    group = answers({"keep": a.pk, "drop": [b.pk], "reason": "duplicate"})
    with use_model(scripted(group, group)):
        scope_dedupe(agent=alice.agent, scope=ANA)
        restored = item_stale_undo(item=MemoryItem.objects.get(pk=b.pk), actor="staff:rita")
        assert restored.status == "active" and "stale_because" not in restored.metadata
        assert restored.metadata["stale_undone"]["by"] == "staff:rita"
        outcome = scope_dedupe(agent=alice.agent, scope=ANA)
    assert outcome.stale == [] and outcome.refused == [{"why": "a reviewer took it back from stale", "item": b.pk}]
    assert AuditRecord.objects.get(action="item.stale_undone").subject == b.pk
    with pytest.raises(Conflict):
        item_stale_undo(item=restored, actor="staff:rita")  # not stale any more


def test_subjects_are_joined_by_the_name_entities_are_matched_on_not_a_staff_rename(alice: Caller) -> None:
    # A staff rename leaves the name an entity is matched on (items about "Ana" still find it), and
    # dedupe joins subjects on that name, as before encryption at rest (which hashes that column).
    ana = active_item(agent=alice.agent, subject="Ana", attribute="diet", value="vegetarian")
    silva = active_item(agent=alice.agent, subject="Ana Silva", attribute="food", value="vegetarian")
    Entity.objects.filter(pk=ana.entity_id).update(name="Ana S.")
    Entity.objects.filter(pk=silva.entity_id).update(aliases=["Ana"])

    (subject,) = dedupe_subjects(agent=alice.agent, scope=ANA)
    assert {e.pk for e in subject.entities} == {ana.entity_id, silva.entity_id}
