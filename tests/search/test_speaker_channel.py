"""The speaker channel (memoryapp.search.turn_entities.speaker_turns): in a conversation of two, a
question naming one of them reads that person's own turns, nearest the question without her name,
as a list of its own; never the other's turns, nothing in a group chat; off unless
SEARCH_SPEAKER_CHANNEL; with encryption on, the sender is told by the blind index of her name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memoryapp.search.retrieval import search
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import EntityFactory, ThreadFactory
from tests.kit.recall import embedded


def _turn(text: str, sender: str, day: int) -> dict[str, Any]:
    return {
        "role": "user" if sender == "Tim" else "assistant",
        "content": text,
        "created_at": datetime(2026, 5, day, 12, 0, tzinfo=UTC),
        "sender_name": sender,
    }


# John's games are told across sittings; Tim talks of games far more, and names John in each turn.
TURNS = [
    _turn("John, games of chess online are my thing, I won three games of chess this week", "Tim", 1),
    _turn("We won the basketball game against the Hawks last night", "John", 1),
    _turn("John, I watched two games of football and won a bet on both games", "Tim", 2),
    _turn("Another win for us, a buzzer-beater in the fourth quarter", "John", 3),
    _turn("I bought a new pair of running shoes for the park", "John", 4),
]


@pytest.fixture(autouse=True)
def speaker_channel_on(settings: Any) -> None:
    settings.SEARCH_SPEAKER_CHANNEL = True


def _ids(thread: Any, *fragments: str) -> list[str]:
    texts = {e.pk: e.text for e in thread.entries.all()}  # opened when sealed
    return [next(pk for pk, text in texts.items() if fragment in text) for fragment in fragments]


def _speaker_alone(agent: Any, thread: Any, text: str, channel: str = "speaker") -> list[str]:
    """The hits of one channel alone (the speaker channel, or another by name)."""
    outcome = search(
        agent=agent,
        text=text,
        thread=thread,
        kinds=("entries",),
        limit=10,
        channels=(channel,),
        neighbours=False,
        diversify=False,
    )
    assert outcome.errors == []
    return [h.id for h in outcome.hits]


def test_a_question_naming_one_of_two_speakers_reads_her_own_turns_alone(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    embedded(alice.agent)
    johns = set(_ids(thread, "basketball game", "buzzer-beater", "running shoes"))
    found = _speaker_alone(alice.agent, thread, "How many games has John won?")
    assert set(found) == johns
    # In the fusion, the channel's list is one of those fused.
    outcome = search(agent=alice.agent, text="How many games has John won?", thread=thread, kinds=("entries",))
    assert set(outcome.channel_lists[("entry", "speaker")]) == johns
    assert any("speaker" in h.channels for h in outcome.hits)
    # A question naming nobody, or both, reads nothing.
    assert _speaker_alone(alice.agent, thread, "How many games were won?") == []
    assert _speaker_alone(alice.agent, thread, "How many games have John and Tim won?") == []


def test_the_speaker_channel_is_off_unless_its_setting_says_on(alice: Any, settings: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    embedded(alice.agent)
    settings.SEARCH_SPEAKER_CHANNEL = False
    outcome = search(agent=alice.agent, text="How many games has John won?", thread=thread, kinds=("entries",))
    assert ("entry", "speaker") not in outcome.channel_lists
    # Asked for by name (eval_retrieval's "that channel alone"), it runs whatever the setting says.
    assert len(_speaker_alone(alice.agent, thread, "How many games has John won?")) == 3


def test_in_a_group_chat_the_speaker_channel_reads_nothing(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=[*TURNS, _turn("Count me in for the next game", "Ana", 5)])
    embedded(alice.agent)
    assert _speaker_alone(alice.agent, thread, "How many games has John won?") == []


def test_with_encryption_on_the_speaker_is_told_by_her_names_hashes(
    encrypted: Any,  # noqa: F811
    alice: Any,
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    embedded(alice.agent)
    johns = set(_ids(thread, "basketball game", "buzzer-beater", "running shoes"))
    assert set(_speaker_alone(alice.agent, thread, "How many games has John won?")) == johns


def test_the_entity_channel_drops_a_speakers_name_only_when_the_speaker_channel_reads_her_turns(
    alice: Any, settings: Any
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    EntityFactory(agent=alice.agent, name="John")
    EntityFactory(agent=alice.agent, name="Tim")
    embedded(alice.agent)
    # One speaker named: her turns come through the speaker channel; "John" is no entity here.
    assert _speaker_alone(alice.agent, thread, "How many games has John won?", "entity") == []
    # Both named: the speaker channel reads nothing, so the entity channel keeps both names, as off.
    both = "How many games have John and Tim won?"
    on = _speaker_alone(alice.agent, thread, both, "entity")
    settings.SEARCH_SPEAKER_CHANNEL = False
    assert on and on == _speaker_alone(alice.agent, thread, both, "entity")
    assert _speaker_alone(alice.agent, thread, "How many games has John won?", "entity")
