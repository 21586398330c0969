"""Playbook rules and observations go with the items they name when a cascade takes those items."""

from __future__ import annotations

import pytest

from governance.models import AuditRecord
from memoryapp.consolidation.fold import (
    PLAYBOOK_DRAFT_PATH,
    PLAYBOOK_PATH,
    parse_playbook,
    playbook_fold,
    playbook_promote,
)
from memoryapp.consolidation.observations import OBSERVATIONS_DIRECTORY, observations_refresh
from memoryapp.content import REDACTED_TEXT
from memoryapp.files.access import FileAccess
from memoryapp.files.services import files_list
from memoryapp.forgetting.services import entry_delete
from memoryapp.items.rules import Scope
from memoryapp.llm.port import use_model
from memoryapp.models import Entry, MemoryFileVersion, MemoryItem
from tests.kit.api import Caller
from tests.kit.consolidation import active_item, answering, answers, scripted
from tests.kit.factories import EntryFactory, MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db

ANA = Scope(user_id="u-ana")


def _said(caller: Caller, text: str) -> Entry:
    thread = ThreadFactory(agent=caller.agent, external_id="t-said")
    return EntryFactory(thread=thread, role="user", content=text)


def _lesson(caller: Caller, entry: Entry, value: str, quote: str) -> MemoryItem:
    return MemoryItemFactory(
        agent=caller.agent,
        kind="lesson",
        subject="booking",
        attribute=value,
        value=value,
        trust="user",
        evidence=[{"entry_id": entry.id, "quote": quote}],
    )


def _versions(caller: Caller, path: str) -> list[MemoryFileVersion]:
    return list(MemoryFileVersion.objects.filter(agent=caller.agent, path=path).order_by("sequence"))


def test_a_lesson_that_goes_takes_its_rules_and_every_version_naming_it_the_other_rules_stay(alice: Caller) -> None:
    said = _said(alice, "Ask me the dates first. And never book rooms facing the street.")
    dates = _lesson(alice, said, "Ask for the dates first", "Ask me the dates first")
    other = EntryFactory(thread=said.thread, role="user", content="Prices in euros, always.")
    euros = _lesson(alice, other, "Quote prices in euros", "Prices in euros, always")

    def one_rule_each(shown: str) -> str:
        return answers(
            *(
                {"op": "add", "rule": f"Rule for {i}. [lesson:{i}]"}
                for i in (dates.pk, euros.pk)
                if f"[lesson:{i}]" in shown
            )
        )

    with use_model(answering(one_rule_each)):
        playbook_fold(agent=alice.agent, scope=ANA)
    playbook_promote(agent=alice.agent, scope=ANA, actor="staff:rita")
    (promoted,) = [v for v in _versions(alice, PLAYBOOK_PATH) if v.content]
    assert len(parse_playbook(promoted.content)) == 2

    entry_delete(entry=said, actor="agent:alice")

    assert not MemoryItem.objects.filter(pk=dates.pk).exists()
    versions = _versions(alice, PLAYBOOK_PATH)
    assert versions[-1].author == "memory" and parse_playbook(versions[-1].content) == [
        f"Rule for {euros.pk}. [lesson:{euros.pk}]"
    ]
    assert all(v.content == REDACTED_TEXT for v in versions[:-1]) and all(v.redacted_at for v in versions[:-1])
    assert all(dates.pk not in (v.content or "") for v in MemoryFileVersion.objects.filter(agent=alice.agent))
    record = AuditRecord.objects.get(action="lineage.forget")
    assert record.details["playbook_rules_removed"] == 1 and record.details["file_versions_redacted"] >= 2


def test_a_draft_waiting_loses_the_rule_too_and_can_still_be_promoted(alice: Caller) -> None:
    said = _said(alice, "Ask me the dates first please.")
    dates = _lesson(alice, said, "Ask for the dates first", "Ask me the dates first")
    stays = active_item(agent=alice.agent, kind="lesson", subject="booking", attribute="euros", value="Prices in euros")
    rules = [f"Ask for the dates. [lesson:{dates.pk}]", f"Prices in euros. [lesson:{stays.pk}]"]
    with use_model(scripted(answers(*({"op": "add", "rule": r} for r in rules)))):
        playbook_fold(agent=alice.agent, scope=ANA)
    entry_delete(entry=said, actor="agent:alice")
    draft = _versions(alice, PLAYBOOK_DRAFT_PATH)[-1]
    assert parse_playbook(draft.content) == [rules[1]]
    promoted = playbook_promote(agent=alice.agent, scope=ANA, actor="staff:rita", draft_version_id=draft.pk)
    assert parse_playbook(promoted.playbook.content) == [rules[1]]


def test_an_observation_naming_an_item_that_went_is_redacted_and_deleted_then_written_again(alice: Caller) -> None:
    said = _said(alice, "I am vegetarian and I live in Porto.")
    diet = MemoryItemFactory(
        agent=alice.agent, attribute="diet", value="vegetarian", trust="user",
        evidence=[{"entry_id": said.id, "quote": "I am vegetarian"}],
    )  # fmt: skip
    others = [
        active_item(agent=alice.agent, attribute=a, value=v)
        for a, v in (("city", "Porto"), ("job", "nurse"), ("pet", "cat"))
    ]

    def cite_all(shown: str) -> str:
        ids = [i for i in (diet.pk, *(o.pk for o in others)) if i in shown]
        return answers({"text": "Ana lives simply. " + " ".join(f"[item:{i}]" for i in ids)})

    with use_model(answering(cite_all)):
        observations_refresh(agent=alice.agent, scope=ANA)
    access = FileAccess(agent=alice.agent, user_id="u-ana")
    (head,) = files_list(access=access, under=OBSERVATIONS_DIRECTORY)

    entry_delete(entry=said, actor="agent:alice")

    assert files_list(access=access, under=OBSERVATIONS_DIRECTORY) == []  # its path left the listing
    history = _versions(alice, head.path)
    assert history[0].content == REDACTED_TEXT and history[-1].content is None
    with use_model(answering(cite_all)) as model:
        again = observations_refresh(agent=alice.agent, scope=ANA)
    assert len(again.written) == 1 and diet.pk not in model.calls[0].messages[0]["content"]  # type: ignore[union-attr]
