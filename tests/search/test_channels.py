"""The search's channels on small made-up threads: the registry, the time and entity turn channels,
query analysis (kinds, small talk), the word-share rerank and the reranker port's failure path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test import override_settings

from memoryapp.models import Entity
from memoryapp.search import channels as registry
from memoryapp.search import retrieval, turn_time
from memoryapp.search.channel_set import channel_names
from memoryapp.search.channels import ENTRY, Channel, ChannelInput
from memoryapp.search.hybrid import Fused
from memoryapp.search.keyword import ChannelHit
from memoryapp.search.query import analyze_query
from memoryapp.search.rerank import HttpReranker, RerankerError, rerank_order, scores_from
from memoryapp.search.retrieval import Hit, _entry_neighbours, rerank_by_words_and_use, search
from memoryapp.search.scope import EntryScope
from memoryapp.search.speakers import addressed_speakers, without_addressed_names
from memoryapp.search.turn_time import DAY, MONTH, WEEK, YEAR, named_time
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import MemoryItemFactory, ThreadFactory
from tests.kit.recall import by_text, embedded
from tests.kit.servers import ModelServer, Reply, free_port

NOW = datetime(2026, 10, 21, 15, 0, tzinfo=UTC)


def _at(year: int, month: int, day: int, hour: int = 12, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def _turn(role: str, text: str, at: datetime, sender: str = "") -> dict[str, Any]:
    turn: dict[str, Any] = {"role": role, "content": text, "created_at": at}
    if sender:
        turn["sender_name"] = sender
    return turn


STAYS = [
    _turn("user", "We booked the Alfama guesthouse with the blue door for our stay", _at(2026, 3, 31, 23, 30)),
    _turn("assistant", "Lovely, enjoy the guesthouse and the view", _at(2026, 3, 31, 23, 31)),
    _turn("user", "This time we stayed at a lakeside cabin with a wood stove", _at(2026, 8, 10)),
    _turn("assistant", "A cabin by the lake sounds restful", _at(2026, 8, 10, 12, 1)),
    _turn("user", "Our trip to Porto starts tomorrow, train at nine", _at(2026, 9, 20)),
    _turn("user", "I bought new hiking boots for the trip", _at(2026, 9, 6)),
    _turn("user", "The weather is grey again today", _at(2026, 10, 20)),
]


def _alone(agent: Any, thread: Any, text: str, channel: str, **options: Any) -> list[str]:
    outcome = search(
        agent=agent,
        text=text,
        thread=thread,
        kinds=("entries",),
        limit=10,
        channels=(channel,),
        neighbours=False,
        diversify=False,
        **options,
    )
    assert outcome.errors == []
    return [h.id for h in outcome.hits]


# --- query analysis --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("When did Ana move to Lisbon?", "temporal"),
        ("What did we do last April?", "temporal"),
        ("How many books has Ana read?", "aggregate"),
        ("What activities does Melanie do?", "aggregate"),
        ("Where does Ana live now?", "update"),
        ("What is my favourite cuisine?", "preference"),
        ("What breed is Rex?", "general"),
    ],
)
def test_the_kind_of_question_is_read_by_rules(text: str, kind: str) -> None:
    assert analyze_query(text).kind == kind


@pytest.mark.parametrize(
    ("text", "voice"),
    [
        ("What did I buy for my sister's birthday?", "user"),
        ("I'm planning a trip to Denver soon. Any suggestions?", "user"),
        ("What was the hotel you recommended in Porto?", "assistant"),
        ("I remember you told me to soak the beans. For how long?", "assistant"),
        ("Going back to our previous chat about tomatoes: which variety was it?", "assistant"),
        ("What did Melanie paint?", ""),
    ],
)
def test_whose_turns_a_question_asks_about_is_read_by_rules(text: str, voice: str) -> None:
    assert analyze_query(text).voice == voice


def test_a_question_lifts_the_turns_of_the_side_it_asks_about() -> None:
    def rows() -> list[Fused]:
        return [Fused(kind="entry", id="assistant", score=1.0), Fused(kind="entry", id="user", score=1.0)]

    loaded = {
        ("entry", role): Hit(
            kind="entry", id=role, text="tomato seedlings need a sunny window", score=0.0, channels=[], role=role
        )
        for role in ("assistant", "user")
    }

    mine = rerank_by_words_and_use(rows(), loaded, analyze_query("Where do I keep my tomato seedlings?"))
    said = rerank_by_words_and_use(rows(), loaded, analyze_query("Where did you tell me to keep tomato seedlings?"))
    neither = rerank_by_words_and_use(rows(), loaded, analyze_query("Where does Ana keep tomato seedlings?"))

    assert [r.id for r in mine] == ["user", "assistant"] and mine[0].score > mine[1].score
    assert [r.id for r in said] == ["assistant", "user"] and said[0].score > said[1].score
    assert neither[0].score == neither[1].score


def test_a_first_person_question_finds_the_persons_own_turn_before_the_assistants_echo(alice: Any) -> None:
    # The assistant repeats the person's words, later (recency favours it) and at more length.
    thread = ThreadFactory(
        agent=alice.agent,
        turns=[
            _turn("user", "I repainted my bedroom walls sage green", _at(2026, 5, 1)),
            _turn(
                "assistant",
                "Sage green bedroom walls! Repainted walls in sage green calm a bedroom",
                _at(2026, 5, 1, 12, 1),
            ),
            _turn("user", "Now I need new curtains", _at(2026, 5, 1, 12, 2)),
        ],
    )
    embedded(alice.agent)

    mine = search(
        agent=alice.agent, text="What color did I repaint my bedroom walls?", thread=thread, kinds=("entries",)
    )
    said = search(
        agent=alice.agent, text="Which color did you say suits bedroom walls?", thread=thread, kinds=("entries",)
    )

    assert mine.hits[0].id == by_text(thread, "I repainted").id
    assert said.hits[0].id == by_text(thread, "Sage green bedroom").id


def test_small_talk_is_not_searched_by_recall(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=[("user", "thanks, you are great"), ("user", "thanks for the map")])
    assert analyze_query("Thanks!").small_talk and analyze_query("how are you?").small_talk
    assert not analyze_query("Thanks for the map of Lisbon, where is the castle?").small_talk

    skipped = search(agent=alice.agent, text="thanks!", thread=thread, skip_small_talk=True)
    asked = search(agent=alice.agent, text="the map, thanks!", thread=thread, skip_small_talk=True)

    assert skipped.hits == [] and skipped.warnings == ["small talk: not searched"]
    assert asked.hits[0].id == by_text(thread, "thanks for the map").id and asked.warnings == []


# --- the time channel ------------------------------------------------------------------------------


def test_named_times_resolve_to_an_interval_with_its_precision() -> None:
    lisbon = ZoneInfo("Europe/Lisbon")
    april = named_time("Where did we stay last April?", NOW, lisbon)
    assert april is not None and april.precision == MONTH
    assert april.start == datetime(2026, 4, 1, tzinfo=lisbon) and april.end == datetime(2026, 5, 1, tzinfo=lisbon)
    year = named_time("What did I read in 2022?", NOW)
    assert year is not None and (year.start.year, year.end.year, year.precision) == (2022, 2023, YEAR)
    day = named_time("What happened on 7 May 2023?", NOW)
    assert day is not None and day.start == _at(2023, 5, 7, 0) and day.precision == DAY
    weeks = named_time("What did I cook two weeks ago?", NOW)
    assert weeks is not None and weeks.precision == WEEK and weeks.start < NOW - timedelta(days=14) < weeks.end
    assert named_time("What did I do yesterday?", NOW) == named_time("on 20 October", NOW)
    assert named_time("What breed is Rex?", NOW) is None
    # An event of the thread dates the span: "two weeks before the trip".
    trip = _at(2026, 9, 20)
    before = named_time("What did I buy two weeks before the trip?", NOW, event_date=lambda words: trip)
    assert before is not None and before.start <= trip - timedelta(days=14) < before.end


def test_a_dated_question_finds_the_turn_of_that_time_in_the_threads_zone(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=STAYS, metadata={"time_zone": "Europe/Lisbon"})
    embedded(alice.agent)
    guesthouse = by_text(thread, "Alfama guesthouse").id

    found = _alone(alice.agent, thread, "Where did we stay last April?", "time", anchor=NOW)

    # 23:30 UTC on 31 March is 00:30 on 1 April in Lisbon: April there, not in UTC.
    assert found[0] == guesthouse
    assert by_text(thread, "lakeside cabin").id not in found
    utc = ThreadFactory(agent=alice.agent, external_id="t-utc", turns=STAYS)
    embedded(alice.agent)
    assert by_text(utc, "Alfama guesthouse").id not in _alone(
        alice.agent, utc, "Where did we stay last April?", "time", anchor=NOW
    )
    hybrid = search(
        agent=alice.agent, text="Where did we stay last April?", thread=thread, kinds=("entries",), anchor=NOW
    )
    assert hybrid.hits[0].id == guesthouse and "time" in hybrid.hits[0].channels


def test_a_time_relative_to_an_event_of_the_thread_is_dated_by_that_event(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=STAYS)
    embedded(alice.agent)

    found = _alone(alice.agent, thread, "What did I buy two weeks before the trip to Porto?", "time", anchor=NOW)

    assert found[0] == by_text(thread, "hiking boots").id


@pytest.mark.parametrize("walk", [False, True], ids=["exact", "walk"])
def test_a_when_question_reads_the_turns_that_state_a_time(
    alice: Any, walk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if walk:
        # A large scope reads the turns meeting the condition by the HNSW walk (issue 26); this one
        # counts as large, and the walk finds what the exact read finds.
        monkeypatch.setattr(turn_time, "WALK_FROM_SCOPE", 1)
    thread = ThreadFactory(
        agent=alice.agent,
        turns=[
            _turn("user", "The pottery class is great fun", _at(2026, 5, 1)),
            _turn("user", "I went to my first pottery class yesterday", _at(2026, 5, 2)),
            _turn("user", "Pottery is such a calm hobby", _at(2026, 5, 3)),
        ],
    )
    embedded(alice.agent)

    found = _alone(alice.agent, thread, "When did I go to the pottery class?", "time")

    assert found == [by_text(thread, "yesterday").id]
    assert _alone(alice.agent, thread, "What is my hobby?", "time") == []


# --- the entity channel ----------------------------------------------------------------------------

PEOPLE = [
    _turn("user", "I painted a sunrise over the lake this weekend", _at(2026, 5, 1), sender="Melanie"),
    _turn("assistant", "I painted my kitchen walls green", _at(2026, 5, 1, 12, 1), sender="Caroline"),
    _turn("user", "Running keeps me sane", _at(2026, 5, 2), sender="Melanie"),
    _turn("assistant", "Painting with Melanie last year was the best", _at(2026, 5, 2, 12, 1), sender="Caroline"),
    _turn("assistant", "We finally visited Lisboa, the tiles!", _at(2026, 5, 3), sender="Caroline"),
    _turn("user", "The castle was closed", _at(2026, 5, 3, 12, 1), sender="Melanie"),
    _turn("assistant", "Ben here: I paint miniatures at night", _at(2026, 5, 4), sender="Ben"),
]


def test_the_entity_channel_reads_the_turns_of_the_person_the_question_names(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE)
    embedded(alice.agent)

    found = _alone(alice.agent, thread, "What did Melanie paint?", "entity")

    # Melanie's turns and the turn naming her; Caroline's own painting and trip are not hers.
    mine = {by_text(thread, t).id for t in ("sunrise", "Running", "castle", "Painting with Melanie")}
    assert set(found) == mine  # Caroline's painting, not Melanie's
    # In a conversation of two, naming a party narrows little: only entities of memory count there.
    two = ThreadFactory(agent=alice.agent, external_id="t-two", turns=PEOPLE[:-1])
    embedded(alice.agent)
    assert _alone(alice.agent, two, "What did Melanie paint?", "entity") == []


def test_the_entity_channel_finds_an_entity_of_memory_by_its_alias(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE)
    embedded(alice.agent)
    Entity.objects.create(
        agent=alice.agent, user_id="u-ana", name="Lisbon", normalized_name="lisbon", aliases=["Lisboa"]
    )

    found = _alone(alice.agent, thread, "What did we like in Lisbon?", "entity")

    assert found[0] == by_text(thread, "Lisboa").id


def test_an_entity_of_another_agent_is_not_read(alice: Any, bob: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE)
    embedded(alice.agent)
    Entity.objects.create(agent=bob.agent, name="Lisbon", normalized_name="lisbon", aliases=["Lisboa"])

    assert _alone(alice.agent, thread, "What did we like in Lisbon?", "entity") == []


# --- the registry and the fusion -------------------------------------------------------------------


def test_a_registered_channel_is_fused_and_one_that_fails_gives_nothing_with_a_note(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE)
    castle = by_text(thread, "castle").id

    def pointing(ci: ChannelInput) -> list[ChannelHit]:
        return [ChannelHit(id=castle, score=1.0)]

    def failing(ci: ChannelInput) -> list[ChannelHit]:
        raise RuntimeError("graph store unavailable")

    registry.register(Channel(name="test-pointing", kind=ENTRY, run=pointing, default_weight=3.0))
    registry.register(Channel(name="test-failing", kind=ENTRY, run=failing))
    try:
        assert {"test-pointing", "test-failing"} <= set(channel_names(ENTRY))
        outcome = search(agent=alice.agent, text="What did Melanie paint?", thread=thread, kinds=("entries",))
    finally:
        registry.unregister(ENTRY, "test-pointing")
        registry.unregister(ENTRY, "test-failing")

    assert outcome.hits[0].id == castle and "test-pointing" in outcome.hits[0].channels
    assert {"source": "channel:test-failing", "message": "graph store unavailable"} in outcome.errors
    assert outcome.channel_lists[(ENTRY, "test-failing")] == []
    with pytest.raises(ValueError, match="unknown kind of question"):
        registry.register(Channel(name="x", kind=ENTRY, run=pointing, weights={"chitchat": 1.0}))


@pytest.mark.django_db(transaction=True)
def test_a_channel_failing_outside_a_transaction_gives_nothing_and_the_search_goes_on(alice: Any) -> None:
    # A served search runs in autocommit: a channel runs without a savepoint there, and its failed
    # read leaves the connection usable for the channels after it and the rows' load.
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE)
    castle = by_text(thread, "castle").id

    def failing(ci: ChannelInput) -> list[ChannelHit]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM memoryapp_entry")
        return []

    def pointing(ci: ChannelInput) -> list[ChannelHit]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM memoryapp_entry WHERE id = %s", [castle])
            return [ChannelHit(id=cursor.fetchone()[0], score=1.0)]

    registry.register(Channel(name="test-failing-sql", kind=ENTRY, run=failing))
    registry.register(Channel(name="test-pointing-sql", kind=ENTRY, run=pointing, default_weight=3.0))
    try:
        assert not connection.in_atomic_block
        outcome = search(agent=alice.agent, text="What did Melanie paint?", thread=thread, kinds=("entries",))
    finally:
        registry.unregister(ENTRY, "test-failing-sql")
        registry.unregister(ENTRY, "test-pointing-sql")
    assert [e["source"] for e in outcome.errors] == ["channel:test-failing-sql"]
    assert outcome.hits[0].id == castle and "test-pointing-sql" in outcome.hits[0].channels


def test_the_time_channel_reads_nothing_for_a_question_without_a_time(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=STAYS)
    untimed = search(agent=alice.agent, text="Which cabin did we stay at?", thread=thread, kinds=("entries",))
    assert (ENTRY, "time") not in untimed.channel_lists
    timed = search(agent=alice.agent, text="Where did we stay in August?", thread=thread, kinds=("entries",))
    assert (ENTRY, "time") in timed.channel_lists


def test_the_share_of_the_questions_words_lifts_the_turn_holding_them(alice: Any) -> None:
    thread = ThreadFactory(
        agent=alice.agent,
        turns=[
            ("user", "My sister Ana adopted a grey cat"),
            ("user", "Ana's cat is called Miso and sleeps all day"),
            ("user", "Cats sleep a lot"),
        ],
    )
    embedded(alice.agent)

    outcome = search(agent=alice.agent, text="What is the name of Ana's cat?", thread=thread, kinds=("entries",))

    assert outcome.hits[0].id == by_text(thread, "called Miso").id


# --- the reranker port -----------------------------------------------------------------------------


def test_a_reranker_reorders_the_best_hits(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE[:6])
    embedded(alice.agent)
    server = ModelServer([Reply(200, {"results": [{"index": i, "relevance_score": float(i)} for i in range(6)]})])
    with server.running(), override_settings(RERANKER="http", RERANKER_URL=server.url + "/rerank", RERANKER_TOP=30):
        reranked = search(agent=alice.agent, text="What did Melanie paint?", thread=thread, kinds=("entries",), limit=6)
    plain = search(agent=alice.agent, text="What did Melanie paint?", thread=thread, kinds=("entries",), limit=6)

    assert [h.id for h in reranked.hits] == [h.id for h in plain.hits][::-1]
    assert server.seen[0].body["query"] == "What did Melanie paint?" and len(server.seen[0].body["documents"]) == 6
    assert reranked.errors == []


@pytest.mark.parametrize(
    "reply",
    [
        Reply(500, {"error": "overloaded"}),
        Reply(200, {"results": [{"index": 0, "relevance_score": 1.0}]}),  # fewer scores than documents
        Reply(200, {"unexpected": True}),
    ],
)
def test_a_failing_reranker_leaves_the_order_as_it_was_with_a_relevance_error(alice: Any, reply: Reply) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=PEOPLE[:6])
    embedded(alice.agent)
    plain = search(agent=alice.agent, text="What did Melanie paint?", thread=thread, kinds=("entries",), limit=6)
    server = ModelServer([reply])
    with server.running(), override_settings(RERANKER="http", RERANKER_URL=server.url + "/rerank"):
        failed = search(agent=alice.agent, text="What did Melanie paint?", thread=thread, kinds=("entries",), limit=6)

    assert [h.id for h in failed.hits] == [h.id for h in plain.hits]
    assert [e["source"] for e in failed.errors] == ["reranker"]


def test_an_unreachable_reranker_leaves_the_order_as_it_was() -> None:
    reranker = HttpReranker(url=f"http://127.0.0.1:{free_port()}/rerank", model="", api_key="", timeout=2.0)
    with pytest.raises(RerankerError, match="unreachable"):
        reranker.scores("q", ["a", "b"])
    order, error = rerank_order(reranker, "q", ["a", "b", "c"], top=30)
    assert order == [0, 1, 2] and error is not None and error["source"] == "reranker"
    assert scores_from({"scores": [0.1, 0.9]}, 2) == [0.1, 0.9]


# --- the speakers a question names ----------------------------------------------------------------


def test_a_speaker_named_by_the_question_is_held_by_their_own_turns_not_by_the_others_addressing_them() -> None:
    # Two speakers: Caroline's turn says "Melanie" to address her; the question asks about Melanie.
    question = analyze_query("What classes did Melanie start at the studio?")
    rows = [Fused(kind="entry", id="addressing", score=1.0), Fused(kind="entry", id="hers", score=1.0)]
    loaded = {
        ("entry", "addressing"): Hit(
            kind="entry",
            id="addressing",
            text="Melanie, classes at the studio? When did you start?",
            score=0.0,
            channels=[],
            sender_name="Caroline",
        ),
        ("entry", "hers"): Hit(
            kind="entry",
            id="hers",
            text="I started pottery classes at the studio downtown",
            score=0.0,
            channels=[],
            sender_name="Melanie",
        ),
    }

    plain = rerank_by_words_and_use([Fused(**vars(r)) for r in rows], loaded, question)
    addressed = rerank_by_words_and_use(
        [Fused(**vars(r)) for r in rows], loaded, question, speakers=frozenset({"melanie"})
    )

    # Both hold every word when the vocative counts; without it, Melanie's own turn holds more.
    assert [r.id for r in plain] == ["addressing", "hers"]
    assert [r.id for r in addressed] == ["hers", "addressing"]


def test_only_the_two_speakers_of_a_conversation_are_addressed_by_name(alice: Any) -> None:
    two = ThreadFactory(agent=alice.agent, turns=PEOPLE[:-1])
    group = ThreadFactory(agent=alice.agent, external_id="t-group", turns=PEOPLE)
    question = analyze_query("What did Melanie paint?")

    assert addressed_speakers(EntryScope(agent_id=alice.agent.pk, thread_pk=two.pk), question) == {"melanie"}
    # A group chat: a speaker's name in another's turn is as often about them, and counts as a word.
    assert addressed_speakers(EntryScope(agent_id=alice.agent.pk, thread_pk=group.pk), question) == frozenset()


# --- neighbours (step 4) -------------------------------------------------------------------------

SITTING = [
    _turn("user", "Which fantasy book did you finish?", _at(2026, 5, 1, 20, 0)),
    _turn("assistant", "Guess!", _at(2026, 5, 1, 20, 1)),
    _turn("user", "The Hobbit, and I loved it", _at(2026, 5, 1, 20, 2)),
    _turn("user", "Morning! The weather is grey again", _at(2026, 5, 9, 8, 0)),
]


def test_a_hit_pulls_the_turns_up_to_two_away_in_its_sitting_not_the_next_session(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=SITTING)
    ids = list(thread.entries.order_by("seq").values_list("id", flat=True))
    fused = {("entry", ids[0]): Fused(kind="entry", id=ids[0], score=1.0)}

    _entry_neighbours(scope=EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk), fused=fused, top=10, share=0.3)

    scores = {key[1]: round(row.score, 6) for key, row in fused.items()}
    # The answer two turns after the question that matched gets a (halved) share too.
    assert scores == {ids[0]: 1.0, ids[1]: 0.3, ids[2]: 0.15}
    fused = {("entry", ids[2]): Fused(kind="entry", id=ids[2], score=1.0)}
    _entry_neighbours(scope=EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk), fused=fused, top=10, share=0.3)
    # The next session's first turn, a week later, is next in the thread but not an answer.
    assert ids[3] not in {key[1] for key in fused}


# --- the question's vector without the names that only address a speaker ---------------------------


def test_the_names_of_addressed_speakers_are_left_out_of_the_text_to_embed() -> None:
    speakers = frozenset({"melanie", "caroline"})
    assert without_addressed_names("What are Melanie's hobbies?", speakers) == "What are hobbies?"
    assert without_addressed_names("Did Caroline and MELANIE both paint?", speakers) == "Did and both paint?"
    # Whole words only, and a question of nothing but the name stays as it is.
    assert without_addressed_names("Is Melanieville far?", speakers) == "Is Melanieville far?"
    assert without_addressed_names("Melanie?", speakers) == "Melanie?"
    assert without_addressed_names("What are Melanie's hobbies?", frozenset()) == "What are Melanie's hobbies?"


# Turns of 200 characters or more, embedded alone (a shorter one is embedded with the turn before).
VOCATIVES = [
    _turn(
        "user",
        "Melanie! Good morning, Melanie. It has been such a long week here, Melanie, with the move and the boxes"
        " and the new neighbours, and I kept thinking of you, Melanie. Tell me everything soon, Melanie! Truly.",
        _at(2026, 5, 1),
        "Caroline",
    ),
    _turn(
        "assistant",
        "These days I paint birds along the river every weekend: herons, kingfishers, the odd swan, in watercolour"
        " on thick paper, and I paint them from sketches I make at dawn when the light is soft and low. Truly.",
        _at(2026, 5, 1, 12, 1),
        "Melanie",
    ),
    _turn(
        "user",
        "Hey Melanie, so glad to hear from you, Melanie. Melanie, you always know how to cheer me up after a long"
        " day at the office, and the kids here say hello to you too, Melanie. Talk soon, Melanie! Truly, truly.",
        _at(2026, 5, 1, 12, 2),
        "Caroline",
    ),
]


def test_a_question_naming_one_of_two_speakers_finds_their_turn_not_the_turns_addressing_them(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=VOCATIVES)
    embedded(alice.agent)
    hers = by_text(thread, "paint birds").id
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk)
    assert addressed_speakers(scope, analyze_query("What does Melanie paint?")) == {"melanie"}

    def first() -> str:
        outcome = search(
            agent=alice.agent, text="What does Melanie paint?", thread=thread, kinds=("entries",), method="vector"
        )
        assert outcome.errors == []
        return outcome.hits[0].id

    # With her name in the question's vector, the turns saying "Melanie" to her come first.
    monkeypatch.setattr(retrieval, "without_addressed_names", lambda text, speakers: text)
    assert first() != hers
    monkeypatch.undo()
    assert first() == hers


def test_items_are_ranked_by_the_whole_questions_vector_and_turns_without_the_name(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=VOCATIVES)
    embedded(alice.agent)
    asked: list[str] = []
    real = retrieval._query_vector

    def spy(text: str, outcome: Any, **kwargs: Any) -> Any:
        asked.append(text)
        return real(text, outcome, **kwargs)

    monkeypatch.setattr(retrieval, "_query_vector", spy)
    MemoryItemFactory(
        agent=alice.agent, user_id=thread.user_id, subject="Melanie", attribute="hobby", value="Melanie took up pottery"
    )
    search(agent=alice.agent, text="What does Melanie paint?", thread=thread)
    assert sorted(asked) == ["What does Melanie paint?", "What does paint?"]
    asked.clear()
    # A question naming no speaker is embedded once for both.
    search(agent=alice.agent, text="Who paints birds?", thread=thread)
    assert asked == ["Who paints birds?"]


def test_a_failed_second_embedding_ranks_turns_by_the_whole_question_and_says_no_outage(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The question without the addressed name is embedded apart; should that second call fail, the
    turns are ranked by the whole question's vector: the vector channels ran, so the answer must not
    say that vector search was off or the results keyword only."""
    thread = ThreadFactory(agent=alice.agent, turns=VOCATIVES)
    embedded(alice.agent)
    real = retrieval.embed_query

    def flaky(text: str) -> Any:
        if text == "What does paint?":
            raise retrieval.EmbedderError("timed out")
        return real(text)

    monkeypatch.setattr(retrieval, "embed_query", flaky)
    outcome = search(
        agent=alice.agent, text="What does Melanie paint?", thread=thread, kinds=("entries",), method="hybrid"
    )
    assert outcome.channel_lists[(ENTRY, "vector")]
    assert not any("keyword results only" in w for w in outcome.warnings), outcome.warnings
    assert outcome.vector_ok


def test_with_encryption_on_the_addressed_speaker_is_still_found_by_the_senders_keyed_hashes(
    encrypted: Any,  # noqa: F811
    alice: Any,
) -> None:
    """Sender names are sealed with encryption on: the two senders are told by the blind index of
    their names, and a question naming one of them still leaves her name out of the turns' ranking."""
    thread = ThreadFactory(agent=alice.agent, turns=VOCATIVES)
    embedded(alice.agent)
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk)
    assert addressed_speakers(scope, analyze_query("What does Melanie paint?")) == {"melanie"}
    assert addressed_speakers(scope, analyze_query("What does Ben paint?")) == frozenset()
    outcome = search(
        agent=alice.agent, text="What does Melanie paint?", thread=thread, kinds=("entries",), method="vector"
    )
    hers = next(e.pk for e in thread.entries.all() if "paint birds" in e.text)  # sealed: opened here
    assert outcome.hits[0].id == hers
    # The hybrid search's keyword channel and word-share rerank read the sealed turns opened.
    outcome = search(agent=alice.agent, text="What does Melanie paint?", thread=thread, kinds=("entries",))
    assert outcome.errors == [] and hers in [h.id for h in outcome.hits[:3]]
