"""The rules of memory items (004 "Memory Items"), through the items services and selectors."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from governance.models import AuditRecord
from memoryapp.items.rules import same_value
from memoryapp.items.selectors import context_facts, items_for_recall, items_holding, slot_history
from memoryapp.items.services import item_forget, item_write, note_retrieved
from memoryapp.models import Entity, Entry, Evidence, MemoryItem
from tests.kit.concurrency import in_threads
from tests.kit.factories import AgentFactory, EntityFactory, EntryFactory, MemoryItemFactory, ThreadFactory

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def said(agent, text: str, *, role: str = "user", thread_id: str = "t-ana") -> Entry:
    return EntryFactory(thread=ThreadFactory(agent=agent, external_id=thread_id), role=role, content=text)


def statuses(agent) -> list[tuple[str, str]]:
    return list(
        MemoryItem.objects.filter(agent=agent).order_by("valid_from", "recorded_at").values_list("value", "status")
    )


# --- activation -------------------------------------------------------------------------------


def test_a_system_statement_is_active_at_once(alice):
    item = MemoryItemFactory(agent=alice.agent, value="vegan")
    assert (item.status, item.valid_to, item.verified) == ("active", None, False)


def test_a_user_statement_with_holding_quotes_at_the_activation_confidence_is_active(alice):
    entry = said(alice.agent, "I have been vegetarian for years now.")
    item = MemoryItemFactory(
        agent=alice.agent,
        value="vegetarian",
        trust="user",
        confidence=0.7,
        evidence=[{"entry_id": entry.id, "quote": "been  vegetarian"}],
    )
    assert item.status == "active" and item.verified
    assert list(Evidence.objects.filter(item=item).values_list("status", flat=True)) == ["verified"]


@pytest.mark.parametrize(
    ("trust", "quote", "confidence"),
    [
        ("user", "vegetarian for years", 0.69),  # below the activation confidence
        ("user", "I eat meat daily", 0.9),  # the quote is not in the entry
        ("model", "vegetarian for years", 1.0),  # a model cannot plant a memory
        ("tool", "vegetarian for years", 1.0),
        ("web", "vegetarian for years", 1.0),
    ],
)
def test_other_statements_stay_suggested_and_out_of_every_context(alice, trust, quote, confidence):
    entry = said(alice.agent, "I have been vegetarian for years now.")
    item = MemoryItemFactory(
        agent=alice.agent,
        value="vegetarian",
        trust=trust,
        confidence=confidence,
        evidence=[{"entry_id": entry.id, "quote": quote}],
    )
    assert item.status == "suggested"
    assert context_facts(agent=alice.agent, user_id="u-ana") == []
    assert not items_for_recall(agent=alice.agent, user_id="u-ana").exists()


def test_a_user_statement_without_quotes_stays_suggested(alice):
    assert MemoryItemFactory(agent=alice.agent, value="vegetarian", trust="user").status == "suggested"


def test_a_quote_of_another_agents_entry_never_holds(alice, bob):
    entry = said(bob.agent, "I have been vegetarian for years now.")
    item = MemoryItemFactory(
        agent=alice.agent, value="vegetarian", trust="user", evidence=[{"entry_id": entry.id, "quote": "vegetarian"}]
    )
    assert item.status == "suggested" and not item.verified
    assert Evidence.objects.get(item=item).entry_id is None


def test_shadow_mode_writes_even_a_system_statement_as_suggested(alice):
    assert MemoryItemFactory(agent=alice.agent, value="vegan", shadow=True).status == "suggested"


# --- merge ------------------------------------------------------------------------------------


def test_a_repeated_statement_merges_spacing_aside_and_keeps_both_quotes(alice):
    first_entry = said(alice.agent, "I am vegan.")
    second_entry = said(alice.agent, "Still vegan, yes.")
    first = MemoryItemFactory(
        agent=alice.agent,
        value="strict  vegan",
        trust="model",
        evidence=[{"entry_id": first_entry.id, "quote": "I am vegan"}],
    )
    again = MemoryItemFactory(
        agent=alice.agent,
        value=" strict vegan ",
        trust="model",
        evidence=[{"entry_id": second_entry.id, "quote": "Still vegan"}],
    )
    assert again.pk == first.pk
    assert MemoryItem.objects.filter(agent=alice.agent).count() == 1
    assert sorted(Evidence.objects.filter(item=first).values_list("quote", flat=True)) == ["I am vegan", "Still vegan"]


@pytest.mark.parametrize(("a", "b"), [("Vegan", "vegan"), ("-5", "5"), ("+5", "5")])
def test_case_and_signs_count_when_values_compare(alice, a, b):
    assert not same_value(a, b)
    MemoryItemFactory(agent=alice.agent, value=a)
    MemoryItemFactory(agent=alice.agent, value=b)
    assert MemoryItem.objects.filter(agent=alice.agent).count() == 2


def test_a_merge_takes_trust_from_the_more_trusted_source_and_activates(alice):
    claim = MemoryItemFactory(agent=alice.agent, value="vegan", trust="model")
    assert claim.status == "suggested"
    merged = MemoryItemFactory(agent=alice.agent, value="vegan", trust="system")
    assert merged.pk == claim.pk
    assert (merged.trust, merged.status) == ("system", "active")


def test_a_merge_never_lowers_trust_and_takes_verified_from_the_holding_quotes(alice):
    entry = said(alice.agent, "I am vegan.")
    user_claim = MemoryItemFactory(agent=alice.agent, value="vegan", trust="user")
    assert (user_claim.status, user_claim.verified) == ("suggested", False)
    merged = MemoryItemFactory(
        agent=alice.agent, value="vegan", trust="user", evidence=[{"entry_id": entry.id, "quote": "I am vegan"}]
    )
    assert merged.pk == user_claim.pk
    assert (merged.trust, merged.verified, merged.status) == ("user", True, "active")
    again = MemoryItemFactory(agent=alice.agent, value="vegan", trust="model")
    assert (again.pk, again.trust, again.verified) == (user_claim.pk, "user", True)


def test_a_repeat_after_another_value_is_a_new_state(alice):
    with freeze_time(T0):
        MemoryItemFactory(agent=alice.agent, value="vegan")
    with freeze_time(T0 + timedelta(days=1)):
        MemoryItemFactory(agent=alice.agent, value="vegetarian")
    with freeze_time(T0 + timedelta(days=2)):
        MemoryItemFactory(agent=alice.agent, value="vegan")
    assert statuses(alice.agent) == [("vegan", "superseded"), ("vegetarian", "superseded"), ("vegan", "active")]


# --- supersession and time ---------------------------------------------------------------------


def test_a_new_value_closes_the_old_state_where_it_starts(alice):
    old = MemoryItemFactory(agent=alice.agent, value="vegan", valid_from=T0)
    new = MemoryItemFactory(agent=alice.agent, value="vegetarian", valid_from=T0 + timedelta(days=10))
    old.refresh_from_db()
    assert (old.status, old.valid_to) == ("superseded", new.valid_from)
    assert (new.status, new.valid_to) == ("active", None)


def test_a_state_told_late_takes_its_place_in_the_timeline(alice):
    newer = MemoryItemFactory(agent=alice.agent, value="vegetarian", valid_from=T0 + timedelta(days=10))
    late = MemoryItemFactory(agent=alice.agent, value="vegan", valid_from=T0)
    newer.refresh_from_db()
    assert (late.status, late.valid_to) == ("superseded", newer.valid_from)
    assert (newer.status, newer.valid_to) == ("active", None)
    assert [i.value for i in items_holding(agent=alice.agent, user_id="u-ana")] == ["vegetarian"]
    assert [i.value for i in items_holding(agent=alice.agent, user_id="u-ana", as_of=T0 + timedelta(days=1))] == [
        "vegan"
    ]


def test_a_state_that_starts_later_leaves_the_current_one_holding_until_then(alice):
    now = timezone.now()
    current = MemoryItemFactory(agent=alice.agent, value="vegan")
    MemoryItemFactory(agent=alice.agent, value="vegetarian", valid_from=now + timedelta(days=30))
    assert [i.pk for i in items_holding(agent=alice.agent, user_id="u-ana")] == [current.pk]
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-ana")] == ["Ana diet: vegan"]
    later = context_facts(agent=alice.agent, user_id="u-ana", as_of=now + timedelta(days=31))
    assert [f.text for f in later] == ["Ana diet: vegetarian (previously: vegan)"]


def test_a_given_end_is_kept_when_the_timeline_is_laid_out_again(alice):
    trip = MemoryItemFactory(
        agent=alice.agent, value="Lisbon", attribute="city", valid_from=T0, valid_to=T0 + timedelta(days=3)
    )
    MemoryItemFactory(agent=alice.agent, value="Porto", attribute="city", valid_from=T0 + timedelta(days=10))
    trip.refresh_from_db()
    assert trip.valid_to == T0 + timedelta(days=3)
    assert list(items_holding(agent=alice.agent, user_id="u-ana", as_of=T0 + timedelta(days=5))) == []


@pytest.mark.django_db(transaction=True)
def test_racing_writers_of_one_slot_converge_on_one_open_state():
    agent = AgentFactory(slug="racer")

    def writer(n: int) -> MemoryItem:
        return item_write(
            agent=agent,
            kind="fact",
            subject="Ana",
            attribute="city",
            value=f"city {n}",
            trust="system",
            valid_from=T0 + timedelta(hours=n),
        )

    outcomes = in_threads(*(lambda n=n: writer(n) for n in (3, 1, 4, 2, 0, 5)))
    assert [o for o in outcomes if not isinstance(o, MemoryItem)] == []
    rows = list(MemoryItem.objects.filter(agent=agent).order_by("valid_from"))
    assert [r.value for r in rows] == [f"city {n}" for n in range(6)]
    assert [r.status for r in rows] == ["superseded"] * 5 + ["active"]
    for before, after in itertools.pairwise(rows):
        assert before.valid_to == after.valid_from
    assert rows[-1].valid_to is None


def test_as_of_reads_world_time_and_known_at_reads_memory_time(alice):
    with freeze_time(T0):
        MemoryItemFactory(agent=alice.agent, value="vegan", valid_from=T0 - timedelta(days=100))
    with freeze_time(T0 + timedelta(days=5)):
        MemoryItemFactory(
            agent=alice.agent, value="vegetarian", valid_from=T0 - timedelta(days=50)
        )  # told late: it began earlier

    def values(**kw):
        return [i.value for i in items_holding(agent=alice.agent, user_id="u-ana", **kw)]

    assert values() == ["vegetarian"]
    assert values(as_of=T0 - timedelta(days=60)) == ["vegan"]
    assert values(as_of=T0 - timedelta(days=10)) == ["vegetarian"]
    # before the second statement was recorded, memory knew only the first
    assert values(known_at=T0 + timedelta(days=1), as_of=T0 - timedelta(days=200)) == []
    assert values(known_at=T0 + timedelta(days=1), as_of=T0 - timedelta(days=60)) == ["vegan"]
    # memory then did not know vegan had ended 50 days before: it held, as far as memory knew
    assert values(known_at=T0 + timedelta(days=1), as_of=T0 - timedelta(days=10)) == ["vegan"]
    assert values(known_at=T0 + timedelta(days=1)) == ["vegan"]
    assert values(known_at=T0 - timedelta(days=1)) == []


def test_history_of_a_slot_lists_every_value_closed_ones_and_let_go_ones_included(alice):
    first = MemoryItemFactory(agent=alice.agent, value="vegan", valid_from=T0)
    MemoryItemFactory(agent=alice.agent, value="vegetarian", valid_from=T0 + timedelta(days=1))
    last = MemoryItemFactory(agent=alice.agent, value="pescatarian", valid_from=T0 + timedelta(days=2))
    item_forget(item=last, actor="test")
    assert [i.value for i in slot_history(item=first)] == ["vegan", "vegetarian", "pescatarian"]


def test_a_state_let_go_keeps_its_place_so_the_one_before_does_not_come_back(alice):
    MemoryItemFactory(agent=alice.agent, value="vegan", valid_from=T0)
    last = MemoryItemFactory(agent=alice.agent, value="vegetarian", valid_from=T0 + timedelta(days=1))
    item_forget(item=last, actor="reviewer:1")
    assert list(items_holding(agent=alice.agent, user_id="u-ana")) == []
    assert AuditRecord.objects.filter(action="item.forgotten", subject=last.pk, outcome="forgotten").count() == 1
    MemoryItemFactory(agent=alice.agent, value="raw vegan", valid_from=T0 + timedelta(days=2))
    assert [i.value for i in items_holding(agent=alice.agent, user_id="u-ana")] == ["raw vegan"]


# --- opinions -----------------------------------------------------------------------------------


def test_an_opinion_said_again_with_holding_quotes_gains_a_tenth(alice):
    entry = said(alice.agent, "Honestly, Lisbon is the best city.")
    quote = [{"entry_id": entry.id, "quote": "Lisbon is the best city"}]
    first = MemoryItemFactory(
        agent=alice.agent,
        value="Lisbon is the best",
        kind="opinion",
        attribute="best city",
        trust="user",
        confidence=0.7,
        evidence=quote,
    )
    again = MemoryItemFactory(
        agent=alice.agent,
        value="Lisbon is the best",
        kind="opinion",
        attribute="best city",
        trust="user",
        confidence=0.7,
        evidence=quote,
    )
    assert again.pk == first.pk
    assert again.confidence == pytest.approx(0.8)
    unquoted = MemoryItemFactory(
        agent=alice.agent, value="Lisbon is the best", kind="opinion", attribute="best city", trust="user"
    )
    assert unquoted.confidence == pytest.approx(0.8)


def test_an_opinion_contradicted_by_a_less_trusted_source_loses_a_fifth(alice):
    held = MemoryItemFactory(
        agent=alice.agent, value="Lisbon is the best", kind="opinion", attribute="best city", confidence=0.9
    )
    MemoryItemFactory(
        agent=alice.agent, value="Porto is the best", kind="opinion", attribute="best city", trust="model"
    )
    held.refresh_from_db()
    assert held.confidence == pytest.approx(0.7)
    assert held.status == "active"  # the model's contradiction is only a suggestion


# --- scope and contexts ------------------------------------------------------------------------


def test_an_access_sees_items_of_no_scope_and_of_its_own_only(alice, bob):
    MemoryItemFactory(agent=alice.agent, value="agent-wide", attribute="a", user_id="")
    MemoryItemFactory(agent=alice.agent, value="for ana", attribute="b", user_id="u-ana")
    MemoryItemFactory(agent=alice.agent, value="for ben", attribute="c", user_id="u-ben")
    MemoryItemFactory(agent=alice.agent, value="for ana in p1", attribute="d", user_id="u-ana", project_id="p1")
    MemoryItemFactory(agent=bob.agent, value="bob's", attribute="e", user_id="u-ana")

    def seen(**scope):
        return sorted(i.value for i in items_for_recall(agent=alice.agent, **scope))

    assert seen(user_id="u-ana") == ["agent-wide", "for ana"]
    assert seen(user_id="u-ana", project_id="p1") == ["agent-wide", "for ana", "for ana in p1"]
    assert seen() == ["agent-wide"]


def test_an_item_is_about_the_narrowest_entity_its_scope_sees_by_that_name(alice, bob):
    agent_wide = EntityFactory(agent=alice.agent, name="Ana Lima")
    for_ana = EntityFactory(agent=alice.agent, name="ana  lima", user_id="u-ana")
    EntityFactory(agent=alice.agent, name="Ana Lima", user_id="u-ben")
    bobs = EntityFactory(agent=bob.agent, name="Ana Lima", user_id="u-ana")

    about_ana = MemoryItemFactory(agent=alice.agent, subject="ANA   LIMA", attribute="city", value="Porto")
    in_a_project = MemoryItemFactory(agent=alice.agent, subject="Ana Lima", attribute="team", project_id="p1")
    agent_wide_item = MemoryItemFactory(agent=alice.agent, subject="Ana Lima", attribute="job", user_id="")
    someone_new = MemoryItemFactory(agent=alice.agent, subject="Marta", attribute="job", project_id="p1")

    assert about_ana.entity_id == in_a_project.entity_id == for_ana.pk
    assert agent_wide_item.entity_id == agent_wide.pk
    new = Entity.objects.get(pk=someone_new.entity_id)
    assert (new.name, new.normalized_name, new.user_id, new.project_id) == ("Marta", "marta", "u-ana", "p1")
    assert Entity.objects.filter(agent=alice.agent).count() == 4
    assert not MemoryItem.objects.filter(entity=bobs).exists()


def test_context_facts_keep_one_state_per_slot_the_narrowest_on_a_tie_instructions_first(alice):
    with freeze_time(T0):
        MemoryItemFactory(agent=alice.agent, value="omnivore", valid_from=T0, user_id="")
        MemoryItemFactory(agent=alice.agent, value="vegan", valid_from=T0)  # same slot, narrower scope, same start
    with freeze_time(T0 + timedelta(days=1)):
        MemoryItemFactory(agent=alice.agent, value="Lisbon", attribute="city")
    with freeze_time(T0 + timedelta(days=2)):
        MemoryItemFactory(agent=alice.agent, value="Portuguese", attribute="language")
    with freeze_time(T0 + timedelta(days=3)):
        MemoryItemFactory(
            agent=alice.agent,
            value="answer briefly",
            kind="instruction",
            attribute="style",
            valid_from=T0 - timedelta(days=9),
        )
        MemoryItemFactory(
            agent=alice.agent, value="Tea", attribute="drink", kind="preference", valid_from=T0 - timedelta(days=8)
        )
    with freeze_time(T0 + timedelta(days=4)):
        facts = context_facts(agent=alice.agent, user_id="u-ana")
    assert [f.text for f in facts] == [
        "Ana drink: Tea",
        "Ana style: answer briefly",
        "Ana language: Portuguese",
        "Ana city: Lisbon",
        "Ana diet: vegan",
    ]


def test_note_retrieved_counts_each_item_once_per_call(alice):
    a = MemoryItemFactory(agent=alice.agent, value="vegan")
    b = MemoryItemFactory(agent=alice.agent, value="Lisbon", attribute="city")
    at = T0 + timedelta(days=1)
    assert note_retrieved(item_ids=[a.pk, b.pk, a.pk], at=at) == 2
    note_retrieved(item_ids=[a.pk])
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.times_retrieved, b.times_retrieved, b.last_retrieved_at) == (2, 1, at)


def test_every_write_is_audited_without_content(alice):
    item = MemoryItemFactory(agent=alice.agent, value="a secret diet")
    record = AuditRecord.objects.get(action="item.written", subject=item.pk)
    assert record.outcome == "active"
    assert "secret" not in str(record.details)
