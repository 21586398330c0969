"""A hybrid search reads its page's rows in the neighbours' statement (issue 26: one round trip less
per search and context build). Every test compares the new read with the one before it (the
neighbours' statement, then the page's rows read on their own) on the same data: branches left by a
checkout, a fork, a redacted and a deleted turn, another agent holding the same words, with
encryption off and on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp.context.builder import ContextRequest, context_build
from memoryapp.forgetting.services import entry_delete, entry_redact
from memoryapp.models import Entry, Thread
from memoryapp.search import retrieval
from memoryapp.search.hybrid import Fused
from memoryapp.search.retrieval import _entry_neighbours, _load_entries, search
from memoryapp.search.scope import EntryScope
from memoryapp.threads.services import entries_add, thread_checkout, thread_fork
from tests.kit.crypto import encrypted  # noqa: F401  (fixture)
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SAID = [
    "We paddled the kayak across the lake at dawn",
    "Was the lake calm?",
    "Calm, and the tent stayed dry all night",
    "Which paddle did you use?",
    "The carbon paddle, light and stiff",
    "Nice. Any wildlife?",
    "A heron on the far shore of the lake",
    "Did the kayak leak?",
    "No, the kayak was fine, the tent zip broke",
    "Bring a spare zip next time",
]
QUESTIONS = ("kayak on the lake", "paddle and tent", "heron by the lake shore", "what broke on the trip?")


def _turns(texts: list[str], start: datetime) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text, "created_at": start + timedelta(minutes=i)}
        for i, text in enumerate(texts)
    ]


def _world(alice: Any, mallory: Any) -> dict[str, Any]:
    """Alice's trip in two sittings a week apart, a branch left by a checkout, a fork, a redacted and a
    deleted turn; Mallory's thread holding the same words."""
    thread = ThreadFactory(agent=alice.agent, external_id="t-trip")
    first = entries_add(thread=thread, entries=_turns(SAID, START))
    entries_add(thread=thread, entries=_turns(SAID[::-1], START + timedelta(days=7)))
    thread.refresh_from_db()
    # A checkout back to the fourth turn and a new branch from there: the turns after it stay, off it.
    thread = thread_checkout(thread=thread, entry_id=first[3].id)
    entries_add(thread=thread, entries=_turns(["The kayak rack on the car rattled", "Tighten the straps"], START))
    fork = thread_fork(thread=Thread.objects.get(pk=thread.pk), entry_id=first[5].id, new_thread_id="t-fork")
    entries_add(thread=fork, entries=_turns(["In the fork we took the kayak to the river"], START))
    redacted = entry_redact(entry=first[6])
    entry_delete(entry=Entry.objects.get(pk=first[8].pk))
    theirs = ThreadFactory(agent=mallory.agent, external_id="t-trip")
    entries_add(thread=theirs, entries=_turns(SAID, START))
    embedded(alice.agent)
    embedded(mallory.agent)
    return {
        "thread": Thread.objects.get(pk=thread.pk),
        "fork": Thread.objects.get(pk=fork.pk),
        "redacted": redacted.pk,
        "deleted": first[8].pk,
        "theirs": set(Entry.objects.filter(agent=mallory.agent).values_list("id", flat=True)),
    }


def _read_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The read before issue 26: the neighbours' statement read only the neighbours' scores, and step 5
    read the page's rows in a query of its own."""
    real = retrieval._entry_neighbours

    def scores_only(**kwargs: Any) -> dict[str, tuple[Any, ...]]:
        real(**kwargs)
        return {}

    monkeypatch.setattr(retrieval, "_entry_neighbours", scores_only)


def _both_reads(monkeypatch: pytest.MonkeyPatch, run: Any) -> tuple[Any, int, Any, int]:
    run()  # what is cached a minute (the scope's size, the vector space's check) is read here
    with CaptureQueriesContext(connection) as together:
        new = run()
    with monkeypatch.context() as patched:
        _read_apart(patched)
        with CaptureQueriesContext(connection) as apart:
            old = run()
    return new, len(together.captured_queries), old, len(apart.captured_queries)


def _same_pages_as_the_read_apart(alice: Any, mallory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world(alice, mallory)
    gone = {world["redacted"], world["deleted"]} | world["theirs"]
    for thread in (None, world["thread"], world["fork"]):
        for text in QUESTIONS:

            def run(text: str = text, thread: Thread | None = thread) -> Any:
                return search(agent=alice.agent, text=text, thread=thread, limit=5, method="hybrid")

            new, new_queries, old, old_queries = _both_reads(monkeypatch, run)
            assert new.hits, text
            assert [h.as_json() for h in new.hits] == [h.as_json() for h in old.hits]
            assert new_queries == old_queries - 1
            assert not {h.id for h in new.hits} & gone
    for text in QUESTIONS:

        def build(text: str = text) -> Any:
            request = ContextRequest(max_tokens=300, strategy="hybrid", current_input=text)
            return context_build(agent=alice.agent, thread=world["thread"], request=request).as_json()

        new, new_queries, old, old_queries = _both_reads(monkeypatch, build)
        assert new == old
        if new["recalled"]["entries"]:
            assert new_queries == old_queries - 1
        assert not {e["id"] for e in new["recalled"]["entries"]} & gone


def test_a_hybrid_search_and_a_build_read_the_page_as_before_in_one_query_less(
    alice: Any, mallory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _same_pages_as_the_read_apart(alice, mallory, monkeypatch)


@pytest.mark.usefixtures("encrypted")  # before the database's fixtures: torn down after them
def test_with_encryption_on_the_pages_are_those_of_the_read_apart(
    alice: Any, mallory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _same_pages_as_the_read_apart(alice, mallory, monkeypatch)


@pytest.mark.usefixtures("encrypted")
def test_the_rows_read_with_the_neighbours_are_the_agents_and_open_as_the_page_query_opens_them(
    alice: Any, mallory: Any
) -> None:
    world = _world(alice, mallory)
    ours = list(Entry.objects.filter(agent=alice.agent, type="message").values_list("id", flat=True))
    theirs = sorted(world["theirs"])
    # A candidate id of another agent's row (no channel gives one: the channels read the scope) is not
    # read with the neighbours.
    fused = {("entry", i): Fused(kind="entry", id=i, score=1.0 / (n + 1)) for n, i in enumerate(ours + theirs[:2])}
    read = _entry_neighbours(
        scope=EntryScope(agent_id=alice.agent.pk), fused=fused, top=5, share=0.3, preload=len(fused)
    )
    assert set(read) == set(ours)
    apart = _load_entries(sorted(read))
    assert _load_entries(sorted(read), read) == apart
    assert {h.text for h in apart.values()} >= {SAID[0], "In the fork we took the kayak to the river"}
    assert apart[world["redacted"]].text == "[redacted]"


def test_a_page_holds_each_entrys_time_to_the_microsecond_before_1970_too(alice: Any) -> None:
    """The page's times are read as microseconds since the epoch (issue 26): each is the entry's own."""
    thread = ThreadFactory(agent=alice.agent)
    times = [
        datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),
        datetime(2024, 2, 29, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 3, 1, 9, 0, 0, 1, tzinfo=UTC),
    ]
    written = entries_add(
        thread=thread,
        entries=[{"role": "user", "content": f"kayak trip {n}", "created_at": t} for n, t in enumerate(times)],
    )
    embedded(alice.agent)
    stored = {e.id: e.created_at for e in Entry.objects.filter(thread=thread)}
    assert sorted(stored.values()) == times
    for method in ("hybrid", "keyword"):
        hits = search(agent=alice.agent, text="kayak trip", thread=thread, limit=5, method=method).hits
        assert {h.id: h.as_json()["created_at"] for h in hits} == {i: t.isoformat() for i, t in stored.items()}
    assert {i: h.created_at for i, h in _load_entries([e.id for e in written]).items()} == stored
