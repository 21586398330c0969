"""The context builder over POST /api/v1/threads/{id}/context: strategies, partitions, budget."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryapp.context import builder
from memoryapp.context.history import off_branch
from memoryapp.forgetting.services import entry_delete
from memoryapp.models import Entry, MemoryItem, Thread
from memoryapp.search import embedders
from memoryapp.threads.services import thread_rewind
from memoryapp.tokens import count_message_tokens, count_messages_tokens
from tests.kit.api import build_context
from tests.kit.factories import EntryFactory, MemoryItemFactory, ThreadFactory, tool_thread
from tests.kit.recall import FailingEmbedder, by_text, embedded


def _build(caller: Any, thread_id: str = "t-1", **body: Any) -> Any:
    return caller.client.post(f"/api/v1/threads/{thread_id}/context", body, format="json")


def _history(built: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in built["messages"] if "entry_id" in m]


def _budget_kept(built: dict[str, Any], max_tokens: int, reserve: int) -> None:
    """The budget holds to the token: what is sent, plus the input, is within it."""
    sent = count_messages_tokens(built["messages"])
    assert sent <= built["token_count"]
    assert built["token_count"] + built["partitions"].get("final", 0) <= max_tokens - reserve
    assert built["token_count"] == sum(v for k, v in built["partitions"].items() if k != "final")


def _turns(n: int, words: int = 12) -> list[tuple[str, str]]:
    turns = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        turns.append((role, f"turn {i} " + " ".join(f"w{i}x{j}" for j in range(words))))
    return turns


# --- recent ---------------------------------------------------------------------------------


def test_recent_keeps_the_newest_unbroken_run_within_the_budget_to_the_token(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=_turns(40))
    for max_tokens in (300, 301, 517, 1000):
        built = build_context(
            alice, strategy="recent", max_tokens=max_tokens, reserve_tokens=50, system_prompt="Be brief."
        )

        _budget_kept(built, max_tokens, 50)
        history = _history(built)
        seqs = [by_text(thread, m["content"]).seq for m in history]
        assert seqs == list(range(41 - len(seqs), 41)), "one unbroken run ending at the newest"
        assert history[0]["role"] == "user", "a reply never comes without the message it answers"
        assert built["truncated"] is True
        reasons = {b["reason"] for b in built["dropped"]["blocks"]}
        assert reasons == {"budget"}
        assert len(built["dropped"]["entries"]) == 40 - len(history)
        # The room left could not take the next older turn.
        older = by_text(thread, f"turn {40 - len(history) - 1} ")
        assert (
            built["token_count"] + count_message_tokens(older.content)
            > max_tokens - 50 - built["partitions"].get("final", 0)
            or older.role == "assistant"
        )


def test_the_whole_history_fits_a_large_budget_and_nothing_is_truncated(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(6))

    built = build_context(alice, strategy="recent", max_tokens=100_000)

    assert len(_history(built)) == 6
    assert built["truncated"] is False
    assert built["dropped"] == {
        "entries": [],
        "blocks": [],
        "graph_nodes": [],
        "semantic_results": [],
        "token_count": 0,
    }
    assert built["metadata"]["original_message_count"] == 6
    assert built["metadata"]["included_message_count"] == 6


def test_a_long_thread_is_read_in_growing_windows(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(150, words=2))

    built = build_context(alice, strategy="recent", max_tokens=100_000)

    assert len(_history(built)) == 150
    assert built["truncated"] is False


def test_required_partitions_are_fitted_first_and_one_system_message_holds_them(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(10))

    built = build_context(
        alice,
        strategy="recent",
        max_tokens=400,
        reserve_tokens=0,
        system_prompt="You are a concierge.",
        pinned=["The user is on the Pro plan.", "Answer in Portuguese."],
        index="/memories/notes.md",
        brief="Current date: Wednesday.",
        current_input="What changed?",
    )

    system = [m for m in built["messages"] if m["role"] == "system"]
    assert len(system) == 1 and built["messages"][0] is not None
    assert built["messages"][0]["role"] == "system"
    assert "You are a concierge." in system[0]["content"] and "Pro plan" in system[0]["content"]
    assert "/memories/notes.md" in system[0]["content"]
    for name in ("system", "pinned", "index", "brief", "final"):
        assert built["partitions"][name] > 0, name
    assert built["partitions"]["final"] == count_message_tokens("What changed?")
    assert "What changed?" not in str(built["messages"]), "the input is counted, not sent"
    assert built["messages"][-1]["content"].startswith("<memory_context>\nCurrent date: Wednesday.")
    assert built["memory_context"] == built["messages"][-1]["content"]
    _budget_kept(built, 400, 0)


def test_a_system_prompt_over_the_budget_is_sent_whole_with_a_warning(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(4))
    prompt = "Rules. " * 200

    built = build_context(alice, strategy="recent", max_tokens=150, reserve_tokens=0, system_prompt=prompt)

    assert built["messages"][0]["content"] == prompt
    assert _history(built) == []
    assert "larger than the budget" in built["warnings"][0]


def test_cache_breakpoints_mark_the_last_message_and_the_end_of_the_turn_before(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")])

    history = _history(build_context(alice, strategy="recent", max_tokens=2000))

    assert [m.get("cache_breakpoint", False) for m in history] == [False, True, False, True]


def _tool_thread(alice: Any, result_text: str) -> Any:
    thread = ThreadFactory(agent=alice.agent, turns=_turns(6))
    EntryFactory(thread=thread, role="user", content="look up the weather")
    EntryFactory(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": "c1", "name": "weather", "arguments": {"city": "Lisbon"}}],
    )
    EntryFactory(thread=thread, type="tool_result", tool_call_id="c1", content=result_text)
    EntryFactory(thread=thread, role="assistant", content="It is sunny.")
    return thread


def test_a_tool_call_is_never_kept_without_its_result(alice: Any) -> None:
    _tool_thread(alice, "sunny, 24 degrees " * 10)
    # Find budgets at which the cut falls on every side of the pair.
    for max_tokens in range(40, 220, 7):
        built = build_context(alice, strategy="recent", max_tokens=max_tokens, reserve_tokens=0)
        history = _history(built)
        calls = [m for m in history if m.get("tool_calls")]
        results = [m for m in history if m["role"] == "tool"]
        assert len(calls) == len(results), max_tokens
        _budget_kept(built, max_tokens, 0)


def test_a_tool_call_left_unanswered_is_never_sent(alice: Any) -> None:
    # The user moved on before the tool answered: a model API refuses a call without its result.
    thread = ThreadFactory(agent=alice.agent, turns=[("user", "look up the weather")])
    EntryFactory(
        thread=thread, role="assistant", content="", tool_calls=[{"id": "c1", "name": "weather", "arguments": {}}]
    )
    EntryFactory(
        thread=thread,
        role="assistant",
        content="Checking two things.",
        tool_calls=[{"id": "c2", "name": "clock", "arguments": {}}, {"id": "c3", "name": "map", "arguments": {}}],
    )
    EntryFactory(thread=thread, type="tool_result", tool_call_id="c2", content="10:00")
    EntryFactory(thread=thread, role="user", content="never mind, thanks")

    built = build_context(alice, strategy="recent", max_tokens=2000)

    history = _history(built)
    sent_calls = [c["id"] for m in history for c in m.get("tool_calls") or []]
    assert sent_calls == ["c2"]
    assert [m["content"] for m in history] == [
        "look up the weather",
        "Checking two things.",
        "10:00",
        "never mind, thanks",
    ]
    _budget_kept(built, 2000, built["metadata"]["reserve_tokens"])


@pytest.mark.parametrize(("max_tokens", "reserve"), [(50, 25), (150, 100), (199, 100), (1005, 101), (8000, 800)])
def test_the_default_reserve_is_a_tenth_of_the_budget_and_at_least_100(
    alice: Any, max_tokens: int, reserve: int
) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "hi")])
    assert build_context(alice, strategy="recent", max_tokens=max_tokens)["metadata"]["reserve_tokens"] == reserve


def test_an_image_given_as_a_data_url_is_counted_by_its_size() -> None:
    data_url = "data:image/png;base64," + "A" * 40_000
    tokens = count_message_tokens([{"type": "image_url", "image_url": {"url": data_url}}], None)
    assert tokens >= 10_000
    linked = count_message_tokens([{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}], None)
    assert 1000 <= linked < 1100
    assert count_message_tokens([{"type": "audio", "data": "B" * 4000}], None) >= 1000


def test_an_oversized_tool_result_stays_as_a_short_note_and_the_run_goes_on(alice: Any) -> None:
    thread = _tool_thread(alice, "x" * 8000)

    built = build_context(alice, strategy="recent", max_tokens=600, reserve_tokens=0)

    history = _history(built)
    result = next(m for m in history if m["role"] == "tool")
    assert "left out" in result["content"] and result["tool_call_id"] == "c1"
    assert any(m.get("tool_calls") for m in history)
    assert by_text(thread, "look up the weather").id in [m["entry_id"] for m in history], "the run went on"
    oversized = [b for b in built["dropped"]["blocks"] if b["reason"] == "oversized"]
    assert oversized[0]["partition"] == "recent" and oversized[0]["tokens"] > 2000
    _budget_kept(built, 600, 0)


def test_the_compaction_summary_comes_before_the_kept_history(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=_turns(8))
    first_kept = by_text(thread, "turn 6 ")
    EntryFactory(
        thread=thread,
        type="compaction",
        event={"summary": "They talked about turns 0 to 5.", "first_kept_entry_id": first_kept.id},
    )

    built = build_context(alice, strategy="recent", max_tokens=5000, system_prompt="Hi.")

    assert built["messages"][1]["role"] == "user"
    assert built["messages"][1]["content"].startswith("[condensed earlier context]")
    assert "turns 0 to 5" in built["messages"][1]["content"]
    assert [m["entry_id"] for m in _history(built)] == [first_kept.id, by_text(thread, "turn 7 ").id]
    assert built["partitions"]["summaries"] > 0


# --- facts, duplicates, items ------------------------------------------------------------------


def test_facts_go_into_the_memory_context_and_a_fact_the_system_prompt_states_is_a_duplicate(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(2))
    city = MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto")
    plan = MemoryItemFactory(agent=alice.agent, attribute="plan", value="is on the Pro plan", user_id="")
    stated = next(f for f in _facts_text(alice) if "Pro plan" in f)

    built = build_context(alice, strategy="recent", max_tokens=3000, system_prompt=f"Known: {stated}")

    assert "Known facts:" in built["memory_context"]
    assert "lives in Porto" in built["memory_context"]
    assert "Pro plan" not in built["memory_context"]
    assert [f["id"] for f in built["facts"]] == [city.id]
    assert {"partition": "facts", "reason": "duplicate", "source_id": plan.id}.items() <= built["dropped"]["blocks"][
        0
    ].items()
    city.refresh_from_db()
    assert city.times_retrieved == 1


def _facts_text(alice: Any) -> list[str]:
    from memoryapp.items.selectors import context_facts

    return [f.text for f in context_facts(agent=alice.agent, user_id="u-ana", thread_id="t-1")]


def test_include_facts_false_leaves_facts_out(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(2))
    MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto", user_id="")

    built = build_context(alice, strategy="recent", max_tokens=3000, include_facts=False)

    assert built["memory_context"] is None and built["facts"] == []


def test_facts_beyond_their_share_are_dropped_for_budget(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(30))
    for i in range(60):
        MemoryItemFactory(
            agent=alice.agent,
            subject=f"thing {i}",
            attribute="colour",
            value=f"colour number {i} is a long descriptive value",
            user_id="",
        )

    built = build_context(alice, strategy="recent", max_tokens=1000, reserve_tokens=0)

    # Its 15%, and the recall share no strategy but hybrid uses (fill order: facts first).
    assert 0 < built["partitions"]["facts"] <= 500
    assert any(b["partition"] == "facts" and b["reason"] == "budget" for b in built["dropped"]["blocks"])
    _budget_kept(built, 1000, 0)


def test_a_threads_context_holds_the_items_of_its_project_and_none_of_another_project(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(4), metadata={"project_id": "p-garden"})
    ours = MemoryItemFactory(agent=alice.agent, attribute="soil", value="clay soil by the shed", project_id="p-garden")
    theirs = MemoryItemFactory(
        agent=alice.agent, attribute="oven", value="clay oven by the shed", project_id="p-kitchen"
    )
    embedded(alice.agent)

    with_facts = build_context(alice, strategy="recent", max_tokens=3000)
    recalled = build_context(
        alice,
        strategy="hybrid",
        max_tokens=3000,
        current_input="What is made of clay by the shed?",
        include_facts=False,
    )

    assert [f["id"] for f in with_facts["facts"]] == [ours.id]
    assert [i["id"] for i in recalled["recalled"]["items"]] == [ours.id]
    assert theirs.value not in str(with_facts) + str(recalled)


# --- hybrid --------------------------------------------------------------------------------------

OLD_TURNS = [
    ("user", "My sister Marta moved to Lisbon in 2019 and works as a nurse there"),
    ("assistant", "That sounds like a big change for her."),
]


def test_hybrid_recalls_older_turns_dated_and_items_but_never_suggested_ones(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=OLD_TURNS + _turns(60))
    embedded(alice.agent)
    MemoryItemFactory(agent=alice.agent, subject="Marta", attribute="job", value="nurse in Lisbon", user_id="")
    MemoryItemFactory(
        agent=alice.agent, kind="preference", attribute="diet", value="vegetarian, strictly", trust="model", user_id=""
    )

    built = build_context(
        alice,
        strategy="hybrid",
        max_tokens=1200,
        reserve_tokens=0,
        current_input="Where does my sister Marta live?",
        include_facts=False,
    )

    old = by_text(thread, "Marta moved")
    assert old.id not in [m["entry_id"] for m in _history(built)]
    assert old.id in [e["id"] for e in built["recalled"]["entries"]]
    assert "Earlier in this conversation:" in built["memory_context"]
    assert f"[{old.created_at.date().isoformat()}]" in built["memory_context"]
    assert [i["text"] for i in built["recalled"]["items"]] == ["Marta job: nurse in Lisbon"]
    assert "From memory:" in built["memory_context"]
    assert "vegetarian, strictly" not in str(built)
    assert built["partitions"]["recall"] > 0
    _budget_kept(built, 1200, 0)


def test_hybrid_recalls_no_turn_of_a_branch_left_by_a_rewind(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=_turns(4))
    wrong = EntryFactory(thread=thread, role="assistant", content="Your sister Marta lives in Madrid, I believe.")
    EntryFactory(thread=thread, role="user", content="No, that is wrong.")
    rewound = alice.client.post("/api/v1/threads/t-1/rewind", {"entry_id": wrong.parent_id}, format="json")
    assert rewound.status_code == 200
    thread.refresh_from_db()
    assert thread.branched
    for role, text in OLD_TURNS + _turns(60):
        EntryFactory(thread=thread, role=role, content=text)
    embedded(alice.agent)

    built = build_context(
        alice, strategy="hybrid", max_tokens=1200, reserve_tokens=0, current_input="Where does Marta live?"
    )

    recalled = [e["id"] for e in built["recalled"]["entries"]]
    assert by_text(thread, "Marta moved").id in recalled
    assert wrong.id not in recalled and "Madrid" not in built["memory_context"]
    # Built from the old leaf, the rewound branch is that context's past again.
    old_leaf = build_context(
        alice,
        strategy="hybrid",
        max_tokens=1200,
        reserve_tokens=0,
        current_input="Where does Marta live?",
        leaf_id=by_text(thread, "No, that is wrong").id,
    )
    assert "Madrid" in str(old_leaf["messages"]) or wrong.id in [e["id"] for e in old_leaf["recalled"]["entries"]]
    # Checked out there, the newer branch is the one left: what was recalled before is not now.
    moved = alice.client.post(
        "/api/v1/threads/t-1/checkout", {"entry_id": by_text(thread, "No, that is wrong").id}, format="json"
    )
    assert moved.status_code == 200
    again = build_context(
        alice, strategy="hybrid", max_tokens=1200, reserve_tokens=0, current_input="Where does Marta live?"
    )
    assert by_text(thread, "Marta moved").id not in [e["id"] for e in again["recalled"]["entries"]]
    assert "Marta moved" not in str(again["messages"])


def test_the_off_branch_set_belongs_to_the_epoch_it_was_read_with(alice: Any) -> None:
    # A build that read the thread before an append (or a delete of the leaf) must not cache the
    # newer turn as off its branch: the set is read with the leaf and epoch it belongs to.
    thread = ThreadFactory(agent=alice.agent, turns=_turns(3))
    first = Entry.objects.filter(thread=thread).order_by("seq").first()
    assert first is not None
    left = EntryFactory(thread=thread, role="assistant", content="A turn the rewind leaves.")
    thread_rewind(thread=thread, entry_id=left.parent_id or "")
    stale = Thread.objects.get(pk=thread.pk)
    newer = EntryFactory(thread=thread, role="user", content="Written after the build read the thread.")
    assert set(off_branch(stale, None, None)) == {left.id}
    fresh = Thread.objects.get(pk=thread.pk)
    assert set(off_branch(fresh, None, None)) == {left.id} and newer.id not in off_branch(fresh, None, None)
    entry_delete(entry=Entry.objects.get(pk=newer.id))  # the leaf goes: its parent is the leaf again
    assert set(off_branch(Thread.objects.get(pk=thread.pk), None, None)) == {left.id}


def test_a_compaction_read_in_the_first_window_keeps_all_it_kept(alice: Any) -> None:
    # The compaction is among the newest entries but its cut is far older: every kept entry that
    # fits is sent, and nothing is reported left out.
    thread = ThreadFactory(
        agent=alice.agent, turns=[("user" if i % 2 == 0 else "assistant", f"ok {i}") for i in range(100)]
    )
    first_kept = by_text(thread, "ok 20")
    EntryFactory(
        thread=thread,
        type="compaction",
        event={
            "summary": "They said ok 0 to 19.",
            "first_kept_entry_id": first_kept.id,
            "first_kept_seq": first_kept.seq,
        },
    )
    for i in range(100, 110):
        EntryFactory(thread=thread, role="user" if i % 2 == 0 else "assistant", content=f"ok {i}")

    built = build_context(alice, strategy="recent", max_tokens=1000, reserve_tokens=0)

    kept = [m["content"] for m in _history(built)]
    assert kept[0] == "ok 20" and kept[-1] == "ok 109" and len(kept) == 90
    assert built["truncated"] is False and built["dropped"]["entries"] == []
    _budget_kept(built, 1000, 0)


def test_a_compaction_older_than_the_window_still_applies(alice: Any) -> None:
    # The first window (64 long turns, over the budget) stops far after the compaction: the builder
    # looks before it, finds it, and reads back to its cut.
    thread = ThreadFactory(agent=alice.agent, turns=_turns(20))
    EntryFactory(
        thread=thread,
        type="compaction",
        event={"summary": "They said turns 0 to 9.", "first_kept_entry_id": by_text(thread, "turn 10 ").id},
    )
    for role, text in _turns(120)[20:]:
        EntryFactory(thread=thread, role=role, content=text)

    built = build_context(alice, strategy="recent", max_tokens=1000, reserve_tokens=0)

    assert "turns 0 to 9" in built["messages"][0]["content"]
    assert built["partitions"]["summaries"] > 0
    assert _history(built)[-1]["content"].startswith("turn 119 ")


def test_a_thread_read_in_part_costs_no_more_queries_than_one_read_whole(
    alice: Any, django_assert_num_queries: Any
) -> None:
    # Whether a compaction lies before the window is read with the window (issue 26): a long thread
    # without one costs no lookup more than a short one.
    short = ThreadFactory(agent=alice.agent, external_id="t-short", turns=_turns(4))
    long = ThreadFactory(agent=alice.agent, external_id="t-long", turns=_turns(300))
    request = builder.ContextRequest(max_tokens=1000, reserve_tokens=0, strategy="recent")
    whole = builder.context_build(agent=alice.agent, thread=short, request=request)
    part = builder.context_build(agent=alice.agent, thread=long, request=request)
    assert not whole.truncated and part.truncated and part.memory_context is None

    with CaptureQueriesContext(connection) as queries:
        builder.context_build(agent=alice.agent, thread=short, request=request)
    with django_assert_num_queries(len(queries)):
        builder.context_build(agent=alice.agent, thread=long, request=request)


def test_recall_takes_the_room_a_short_history_leaves(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "hi"), ("assistant", "hello")])
    for i in range(20):
        MemoryItemFactory(
            agent=alice.agent,
            subject="Marta",
            attribute=f"detail{i}",
            value=f"Marta sister Lisbon detail {i} " + "lorem ipsum dolor sit amet " * 8,
            user_id="",
        )
    embedded(alice.agent)

    built = build_context(
        alice,
        strategy="hybrid",
        max_tokens=2000,
        reserve_tokens=0,
        include_facts=False,
        current_input="Where does my sister Marta live in Lisbon?",
    )

    assert len(built["recalled"]["items"]) == 20
    assert not [b for b in built["dropped"]["blocks"] if b["partition"] == "recall" and b["reason"] == "budget"]
    assert len(_history(built)) == 2
    _budget_kept(built, 2000, 0)


def test_the_api_answers_the_built_context_field_for_field(alice: Any) -> None:
    """The builder returns a BuiltContext; the API's answer is its `as_json`, nothing added or lost."""
    thread = ThreadFactory(agent=alice.agent, turns=OLD_TURNS + _turns(60))
    embedded(alice.agent)
    MemoryItemFactory(agent=alice.agent, subject="Marta", attribute="job", value="nurse in Lisbon", user_id="")
    body: dict[str, Any] = {
        "strategy": "hybrid",
        "max_tokens": 1200,
        "reserve_tokens": 0,
        "current_input": "Where does my sister Marta live?",
        "brief": "About Marta.",
    }

    answered = build_context(alice, **body)
    built = builder.context_build(agent=alice.agent, thread=thread, request=builder.ContextRequest(**body))

    assert answered == json.loads(json.dumps(built.as_json()))
    # Every part of the answer has something in it, so none can go missing unseen.
    assert built.facts and built.recalled_entries and built.dropped_entries and built.memory_context
    assert answered["token_count"] == built.token_count > 0


def test_a_recalled_turn_never_repeats_the_kept_history(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=OLD_TURNS + _turns(4))
    embedded(alice.agent)

    built = build_context(alice, strategy="hybrid", max_tokens=8000, current_input="Where does my sister Marta live?")

    assert len(_history(built)) == 6
    assert built["recalled"]["entries"] == []


def test_hybrid_falls_back_to_keyword_recall_when_the_embedder_fails(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=OLD_TURNS + _turns(60))
    monkeypatch.setattr(embedders, "embedder", lambda: FailingEmbedder("connection refused"))

    built = build_context(
        alice, strategy="hybrid", max_tokens=1200, reserve_tokens=0, current_input="Where does Marta live?"
    )

    assert by_text(thread, "Marta moved").id in [e["id"] for e in built["recalled"]["entries"]]
    assert built["errors"][0]["source"] == "semantic"
    assert "connection refused" in built["errors"][0]["message"]


def test_hybrid_without_input_is_the_recent_history(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(10))

    built = build_context(alice, strategy="hybrid", max_tokens=5000)

    assert len(_history(built)) == 10 and built["recalled"] == {"entries": [], "items": []}


# --- relevant ------------------------------------------------------------------------------------


def test_relevant_keeps_the_most_similar_turns_in_conversation_order(alice: Any) -> None:
    thread = ThreadFactory(
        agent=alice.agent,
        turns=[
            ("user", "Tell me about golden retriever puppies"),
            ("assistant", "Golden retriever puppies are friendly and love swimming"),
            *_turns(10),
            ("user", "Which lake is best for swimming dogs?"),
            ("assistant", "The lake at Sintra is calm for swimming dogs"),
            *_turns(4),
        ],
    )
    embedded(alice.agent)

    built = build_context(
        alice, strategy="relevant", max_tokens=140, reserve_tokens=0, current_input="golden retriever puppies swimming"
    )

    ids = [m["entry_id"] for m in _history(built)]
    assert by_text(thread, "Tell me about golden").id in ids
    assert by_text(thread, "Golden retriever puppies are").id in ids
    seq_of = dict(Entry.objects.filter(thread=thread).values_list("id", "seq"))
    seqs = [seq_of[i] for i in ids]
    assert seqs == sorted(seqs)
    assert _history(built)[0]["role"] == "user"
    _budget_kept(built, 140, 0)


def test_relevant_never_sends_a_reply_whose_question_lies_before_its_candidates(alice: Any) -> None:
    turns = [
        ("user", "Tell me about golden retriever puppies"),
        ("assistant", "Golden retriever puppies are friendly and love swimming"),
    ]
    turns += [
        ("user" if i % 2 == 0 else "assistant", f"turn {i} about taxes and invoices number {i}") for i in range(199)
    ]
    ThreadFactory(agent=alice.agent, turns=turns)
    embedded(alice.agent)

    built = build_context(
        alice, strategy="relevant", max_tokens=300, reserve_tokens=0, current_input="golden retriever puppies swimming"
    )

    history = _history(built)
    assert history and history[0]["role"] == "user"
    assert all("Golden retriever puppies are" not in str(m["content"]) for m in history)


def test_relevant_without_input_or_with_a_failing_embedder_is_recent(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(20))
    recent = build_context(alice, strategy="recent", max_tokens=300, reserve_tokens=0)

    without_input = build_context(alice, strategy="relevant", max_tokens=300, reserve_tokens=0)
    monkeypatch.setattr(embedders, "embedder", lambda: FailingEmbedder("connection refused"))
    failing = build_context(alice, strategy="relevant", max_tokens=300, reserve_tokens=0, current_input="turn 3")

    assert _history(without_input) == _history(recent)
    assert _history(failing) == _history(recent)
    assert failing["errors"][0]["source"] == "relevance"


# --- input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 2_000_001}, "max_tokens"),
        ({"max_tokens": 100, "strategy": "best"}, "strategy"),
        ({"max_tokens": 100, "reserve_tokens": 100}, "reserve_tokens"),
        ({"max_tokens": 100, "partitions": {"facts": 0.5, "recall": 0.7}}, "partitions"),
        ({"max_tokens": 100, "partitions": {"system": 0.1}}, "partitions"),
        ({"max_tokens": 100, "partitions": {"facts": 2}}, "partitions"),
        ({"max_tokens": 100, "leaf_id": "ent_nope"}, "leaf_id"),
        ({"max_tokens": 100, "colour": "red"}, "colour"),
    ],
)
def test_bad_context_input_is_a_400_naming_the_field(alice: Any, body: dict[str, Any], field: str) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(2))

    answer = _build(alice, **body)

    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"].split(".")[0] == field


def test_mallorys_context_of_alices_thread_answers_404(alice: Any, mallory: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(2))

    answer = _build(mallory, max_tokens=1000)

    assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"


def test_partition_shares_can_be_overridden(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(80))
    for i in range(20):
        MemoryItemFactory(agent=alice.agent, subject=f"s{i}", attribute="a", value=f"value {i} " * 5, user_id="")

    small = build_context(
        alice, strategy="recent", max_tokens=1000, reserve_tokens=0, partitions={"facts": 0.05, "recall": 0}
    )
    large = build_context(
        alice, strategy="recent", max_tokens=1000, reserve_tokens=0, partitions={"facts": 0.5, "recall": 0}
    )

    assert small["partitions"]["facts"] <= 50 < large["partitions"]["facts"] <= 500
    assert large["partitions"]["recent"] < small["partitions"]["recent"]


def test_leaf_id_builds_the_context_of_another_branch(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=_turns(4))
    turn_1 = by_text(thread, "turn 1 ")
    EntryFactory(thread=thread, role="user", content="a branch question", parent_id=turn_1.id, activate=False)
    branch_leaf = by_text(thread, "a branch question")

    built = build_context(alice, strategy="recent", max_tokens=5000, leaf_id=branch_leaf.id)

    assert [m["content"].split()[0:2] for m in _history(built)][-1] == ["a", "branch"]
    assert len(_history(built)) == 3


def test_as_of_reads_items_as_they_held_then(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=_turns(2))
    past = timezone.now() - timedelta(days=30)
    MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto", valid_from=past, user_id="")
    assert MemoryItem.objects.filter(agent=alice.agent, status="active").count() == 1

    before = build_context(alice, strategy="recent", max_tokens=3000, as_of=(past - timedelta(days=1)).isoformat())
    after = build_context(alice, strategy="recent", max_tokens=3000)

    assert before["facts"] == [] and len(after["facts"]) == 1


def test_after_clearing_old_tool_results_the_context_holds_only_the_newest_result(alice: Any) -> None:
    from memoryapp.compaction.services import compaction_run

    thread = tool_thread(alice.agent, rounds=4, external_id="t-1")
    compaction_run(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})

    built = build_context(alice, strategy="recent", max_tokens=100_000)

    body = str(built)
    assert "PAGE-3-BODY" in body and "PAGE-0-BODY" not in body and "PAGE-2-BODY" not in body
    assert len([m for m in _history(built) if m["role"] == "tool"]) == 4


def test_relevant_falls_back_to_recent_when_the_stored_vectors_do_not_match_the_model(alice: Any) -> None:
    from django.test import override_settings

    from memoryapp.search import retrieval

    ThreadFactory(agent=alice.agent, turns=_turns(20))
    embedded(alice.agent)
    recent = build_context(alice, strategy="recent", max_tokens=300, reserve_tokens=0)
    retrieval._space_checked = None
    try:
        with override_settings(EMBEDDING_DIMENSIONS=768):
            built = build_context(alice, strategy="relevant", max_tokens=300, reserve_tokens=0, current_input="turn 3")
    finally:
        retrieval._space_checked = None

    assert _history(built) == _history(recent)
    assert built["errors"][0]["source"] == "relevance" and "768" in built["errors"][0]["message"]


def test_recall_searches_items_when_the_facts_found_some_and_asks_no_more_when_none(alice: Any) -> None:
    # Recall's items are the facts' items (the thread's scope, time and purpose): the facts' read tells
    # whether any is live (issue 26: one query less a build), so a scope without items runs no item
    # channel and asks nothing more, and one with items still finds them by recall.
    thread = ThreadFactory(agent=alice.agent, turns=[("user", "hi"), ("assistant", "hello")])
    embedded(alice.agent)
    request = builder.ContextRequest(
        max_tokens=4000, strategy="hybrid", current_input="Where does my sister Marta live in Lisbon?"
    )

    def item_reads(queries: CaptureQueriesContext) -> list[str]:
        return [
            q["sql"]
            for q in queries.captured_queries
            if q["sql"].startswith("SELECT") and 'FROM "memoryapp_memoryitem"' in q["sql"]
        ]

    with CaptureQueriesContext(connection) as none:
        builder.context_build(agent=alice.agent, thread=thread, request=request)
    assert len(item_reads(none)) == 1  # the facts' read alone

    for i in range(30):
        MemoryItemFactory(
            agent=alice.agent, subject="Marta", attribute=f"detail{i}", value=f"Marta sister Lisbon {i}", user_id=""
        )
    embedded(alice.agent)
    with CaptureQueriesContext(connection) as some:
        built = builder.context_build(agent=alice.agent, thread=thread, request=request)
    assert len(item_reads(some)) >= 3  # the facts, then the item channels (keyword, vector)
    assert built.facts
