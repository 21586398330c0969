"""The keyword channel and the speakers a question addresses (memoryapp.search.speakers): in a
conversation of two, the name of the speaker the question names counts for a turn as its sender
only, not as a word of the other speaker's turns that say it to her; a name that is no speaker's
stays a word of the text. With encryption on, the sender is told by `sender_name_hashes`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memoryapp.search.keyword import keyword_entries, sender_only_terms
from memoryapp.search.query import analyze_query
from memoryapp.search.retrieval import search
from memoryapp.search.scope import EntryScope
from memoryapp.search.speakers import addressed_speakers
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import ThreadFactory


def _turn(text: str, sender: str, minute: int) -> dict[str, Any]:
    role = "assistant" if sender == "Melanie" else "user"
    return {
        "role": role,
        "content": text,
        "created_at": datetime(2026, 5, 1, 12, minute, tzinfo=UTC),
        "sender_name": sender,
    }


# Caroline says "Melanie" to her in every turn; Melanie's own turns never say her name.
TWO = [
    _turn("Melanie, guess what: I finally framed the herons photo for the hallway", "Caroline", 0),
    _turn("These days I paint herons by the river at dawn", "Melanie", 1),
    _turn("Oh Melanie, Oscar adopted a puppy last week", "Caroline", 2),
    _turn("I told Oscar the puppy should meet my cat", "Melanie", 3),
    _turn("Thanks Melanie, you always cheer me up", "Caroline", 4),
    _turn("Melanie, I bought paint for the fence", "Caroline", 5),
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


def test_only_names_of_addressed_speakers_with_other_words_left_count_as_senders_only() -> None:
    assert sender_only_terms(["paint", "herons", "melanie"], ["melanie"], frozenset({"melanie"})) == {"melanie"}
    # Nothing but the name: it is all there is to search, and stays a word of the text too.
    assert sender_only_terms(["melanie"], ["melanie"], frozenset({"melanie"})) == frozenset()
    # A word that is not a name of the question ("melanie" lower-cased in it) is a word.
    assert sender_only_terms(["paint", "melanie"], [], frozenset({"melanie"})) == frozenset()
    assert sender_only_terms(["paint", "oscar"], ["oscar"], frozenset({"melanie"})) == frozenset()


def test_the_addressed_name_matches_her_turns_not_the_turns_that_say_it_to_her(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TWO)
    paints, fence, thanks = _ids(thread, "paint herons", "paint for the fence", "cheer me up")
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk)
    question = analyze_query("What does Melanie paint?")
    assert addressed_speakers(scope, question) == {"melanie"}
    as_word = keyword_entries(scope=scope, analysis=question, limit=10)
    as_sender = keyword_entries(scope=scope, analysis=question, limit=10, addressed=frozenset({"melanie"}))
    # As a word, "Melanie" said to her makes Caroline's short turn about the fence's paint hold every
    # word of the question, as Melanie's own turn does (her name as its sender): it comes first.
    assert [h.id for h in as_word[:2]] == [fence, paints]
    assert thanks in {h.id for h in as_word}
    # As the sender only, Melanie's turn alone holds both; the turns only saying her name are out.
    assert [h.id for h in as_sender[:2]] == [paints, fence]
    assert thanks not in {h.id for h in as_sender}
    # The search reads the addressed speakers itself.
    assert _keyword(alice.agent, thread, "What does Melanie paint?")[:2] == [paints, fence]


def test_a_question_of_what_the_addressed_speaker_said_finds_her_turns(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TWO)
    hers = set(_ids(thread, "paint herons", "told Oscar"))
    assert set(_keyword(alice.agent, thread, "What did Melanie say?")[:2]) == hers
    # A name of no speaker of the thread stays a word of the text: both turns saying "Oscar".
    found = _keyword(alice.agent, thread, "What did Melanie say about Oscar?")
    assert found[0] == _ids(thread, "told Oscar")[0]
    assert _ids(thread, "Oscar adopted")[0] in found[:3]


def test_in_a_group_chat_a_speakers_name_stays_a_word_of_the_others_turns(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=[*TWO, _turn("Ben here, see you all on Friday", "Ben", 6)])
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk)
    assert addressed_speakers(scope, analyze_query("What does Melanie paint?")) == frozenset()
    paints, fence = _ids(thread, "paint herons", "paint for the fence")
    # Of three speakers, a name in another's turn is as often about her: it counts as a word there.
    assert _keyword(alice.agent, thread, "What does Melanie paint?")[:2] == [fence, paints]


def test_with_encryption_on_the_addressed_name_matches_her_sealed_sender_only(
    encrypted: Any,  # noqa: F811
    alice: Any,
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=TWO)
    paints, fence, thanks, told = _ids(thread, "paint herons", "paint for the fence", "cheer me up", "told Oscar")
    found = _keyword(alice.agent, thread, "What does Melanie paint?")
    assert found[:2] == [paints, fence]
    assert thanks not in found
    assert set(_keyword(alice.agent, thread, "What did Melanie say?")[:2]) == {paints, told}
