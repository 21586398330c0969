"""The keyword channel within a thread reads its matches in no order (issue 26: ranking them by cover
density was a third of the read's CPU) and orders them by BM25 score, then newness; rows tied on both
where the page is laid out are read again ranked, as every read was before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp.search import keyword
from memoryapp.search.keyword import keyword_entries
from memoryapp.search.query import analyze_query
from memoryapp.search.scope import EntryScope
from tests.kit.factories import ThreadFactory

AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _turns(moments: list[datetime]) -> list[dict[str, Any]]:
    # Like turns (the same words of the question, as many lexemes), not the same text.
    return [
        {"role": "user", "content": f"the garden tomatoes are {n}", "created_at": at} for n, at in enumerate(moments)
    ]


def _read(alice: Any, thread: Any) -> tuple[list[str], list[str]]:
    with CaptureQueriesContext(connection) as queries:
        hits = keyword_entries(
            scope=EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk), analysis=analyze_query("garden"), limit=10
        )
    reads = [q["sql"] for q in queries.captured_queries if "search_vector @@" in q["sql"]]
    return [h.id for h in hits], reads


def test_a_threads_matches_are_read_in_no_order_and_ranked_newest_first(alice: Any) -> None:
    thread = ThreadFactory(
        agent=alice.agent, external_id="t-k", turns=_turns([AT + timedelta(minutes=i) for i in range(3)])
    )
    ids, reads = _read(alice, thread)
    assert len(reads) == 1 and "ts_rank_cd" not in reads[0]
    newest_first = list(thread.entries.order_by("-seq").values_list("id", flat=True))
    assert ids == newest_first


def test_rows_tied_on_score_and_newness_are_read_again_ranked(alice: Any) -> None:
    # Two like turns whose newness (their time in seconds plus a millionth of their seq) is equal: the
    # first written a microsecond later than the second.
    thread = ThreadFactory(agent=alice.agent, external_id="t-t", turns=_turns([AT + timedelta(microseconds=1), AT]))
    ids, reads = _read(alice, thread)
    assert len(reads) == 2 and "ts_rank_cd" not in reads[0] and "ts_rank_cd" in reads[1]
    assert sorted(ids) == sorted(thread.entries.values_list("id", flat=True))


def test_an_agent_scope_within_the_cap_is_read_in_no_order(alice: Any) -> None:
    # Every match of a scope of no more rows than the cap is read whatever the order: the agent's
    # scope is ranked by BM25 alone, as a thread's is, newest first among like rows.
    older = ThreadFactory(agent=alice.agent, external_id="t-a1", turns=_turns([AT, AT + timedelta(minutes=1)]))
    newer = ThreadFactory(agent=alice.agent, external_id="t-a2", turns=_turns([AT + timedelta(minutes=2)]))
    with CaptureQueriesContext(connection) as queries:
        hits = keyword_entries(scope=EntryScope(agent_id=alice.agent.pk), analysis=analyze_query("garden"), limit=10)
    reads = [q["sql"] for q in queries.captured_queries if "search_vector @@" in q["sql"]]
    assert len(reads) == 1 and "ts_rank_cd" not in reads[0]
    newest_first = [
        *newer.entries.values_list("id", flat=True),
        *older.entries.order_by("-seq").values_list("id", flat=True),
    ]
    assert [h.id for h in hits] == newest_first


def test_an_agent_scope_above_the_cap_keeps_the_ranked_read(alice: Any, monkeypatch: Any) -> None:
    # Its matches may pass the cap: an unordered read would then be made again ranked.
    monkeypatch.setattr(keyword, "KEYWORD_CANDIDATES", 2)
    ThreadFactory(agent=alice.agent, external_id="t-b", turns=_turns([AT + timedelta(minutes=i) for i in range(3)]))
    with CaptureQueriesContext(connection) as queries:
        hits = keyword_entries(scope=EntryScope(agent_id=alice.agent.pk), analysis=analyze_query("garden"), limit=10)
    reads = [q["sql"] for q in queries.captured_queries if "search_vector @@" in q["sql"]]
    assert len(reads) == 1 and "ts_rank_cd" in reads[0]
    assert len(hits) == 2
