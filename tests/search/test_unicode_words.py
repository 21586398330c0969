"""Words and names of any script in the search: the question's words are read as Postgres' parser
and the blind index read a turn's ("Inês", "café", "São Paulo"), so an accented word is one word,
a capitalised accented word a name, and the keyword channel finds the turns holding it, with
encryption off or on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memoryapp.search.query import analyze_query, tsquery_terms
from memoryapp.search.retrieval import search, word_share
from memoryapp.search.scope import EntryScope
from memoryapp.search.speakers import addressed_speakers
from memoryapp.search.turn_entities import capitalised_runs
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import ThreadFactory


def _turn(text: str, sender: str, minute: int) -> dict[str, Any]:
    return {
        "role": "assistant" if sender == "José" else "user",
        "content": text,
        "created_at": datetime(2026, 5, 1, 12, minute, tzinfo=UTC),
        "sender_name": sender,
    }


TURNS = [
    _turn("José, I found a tiny café near the harbour with blue tiles", "Inês", 0),
    _turn("I bought a cafetière for the flat in São Paulo", "José", 1),
    _turn("José, the caf was shut all week", "Inês", 2),
    _turn("My sister moved to Zürich for her new job", "José", 3),
]


def _ids(thread: Any, *fragments: str) -> list[str]:
    texts = {e.pk: e.text for e in thread.entries.all()}  # opened when sealed
    return [next(pk for pk, text in texts.items() if fragment in text) for fragment in fragments]


def _keyword(agent: Any, thread: Any, text: str) -> list[str]:
    outcome = search(
        agent=agent,
        text=text,
        thread=thread,
        kinds=("entries",),
        limit=10,
        channels=("keyword",),
        neighbours=False,
        diversify=False,
    )
    assert outcome.errors == []
    return [h.id for h in outcome.hits]


def test_an_accented_word_is_one_word_and_a_capitalised_one_a_name() -> None:
    question = analyze_query("What did Inês say about the café in São Paulo?")
    assert question.terms == ["inês", "say", "café", "são", "paulo"]
    assert question.names == ["inês", "são", "paulo"]
    assert tsquery_terms(question) == ["inês", "say", "café", "são", "paulo"]
    # A letter and a combining accent (as some keyboards send it) read as the composed letter.
    assert analyze_query("Ine\u0302s and the cafe\u0301").terms == ["inês", "café"]
    # The typographic apostrophe is an apostrophe: a possessive leaves the name.
    assert analyze_query("Where is Zoë\u2019s flat?").names == ["zoë"]
    assert capitalised_runs("Did Inês fly to São Paulo or to Zürich?") == ["Did Inês", "São Paulo", "Zürich"]


def test_the_word_share_rerank_reads_accented_words_whole() -> None:
    assert word_share(["café"], "a tiny café near the harbour") == 1.0
    assert word_share(["café"], "the caf was shut") == 0.0


def test_the_keyword_channel_finds_an_accented_word_and_an_accented_speaker(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    cafe, flat, shut, zurich = _ids(thread, "tiny café", "cafetière", "caf was", "Zürich")
    # "café" is one word: the turn saying it, not the one saying "caf".
    assert _keyword(alice.agent, thread, "Where is the café?") == [cafe]
    assert _keyword(alice.agent, thread, "Who moved to Zürich?") == [zurich]
    # An accented name is a name: the turns José sent hold it, and Inês' turns saying it to him do
    # not (the two speakers' rule of memoryapp.search.speakers).
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk)
    assert addressed_speakers(scope, analyze_query("What did José say about the flat?")) == {"josé"}
    found = _keyword(alice.agent, thread, "What did José say about the flat?")
    assert found[0] == flat and shut not in found


def test_with_encryption_on_an_accented_word_and_speaker_are_found_by_their_hashes(
    encrypted: Any,  # noqa: F811
    alice: Any,
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TURNS)
    cafe, flat, shut = _ids(thread, "tiny café", "cafetière", "caf was")
    assert _keyword(alice.agent, thread, "Where is the café?") == [cafe]
    found = _keyword(alice.agent, thread, "What did José say about the flat?")
    assert found[0] == flat and shut not in found
