"""How the vector channel reads a scope: the HNSW walk, or exactly (issue 26, memoryapp.search.vector)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp.search import keyword, vector
from memoryapp.search.embedders import embed_query
from memoryapp.search.scope import EntryScope
from memoryapp.search.vector import read_exactly, vector_entries
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded

TOPICS = ("garden tomatoes", "marathon training", "mortgage interest", "pasta sauce", "puppy walk")


def _exact_scores(scope: EntryScope, text: str) -> list[float]:
    """Every cosine of the scope's rows to the text, best first (computed apart, in one read)."""
    where, params = scope.where("e")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 - (e.embedding <=> %(v)s::vector) FROM memoryapp_entry e WHERE {where}"
            " AND e.embedding IS NOT NULL ORDER BY 1 DESC",
            {**params, "v": vector.vector_literal(embed_query(text))},
        )
        return [float(r[0]) for r in cursor.fetchall()]


@pytest.fixture
def two_threads(alice: Any) -> tuple[Any, Any]:
    mine = ThreadFactory(
        agent=alice.agent, external_id="t-mine", turns=[("user", f"My {t} note {i}") for i in range(4) for t in TOPICS]
    )
    other = ThreadFactory(
        agent=alice.agent, external_id="t-other", turns=[("user", f"Other {t} {i}") for i in range(8) for t in TOPICS]
    )
    embedded(alice.agent)
    return mine, other


@pytest.mark.django_db
def test_a_thread_in_a_large_table_is_read_exactly_and_the_agent_by_the_walk(
    alice: Any, two_threads: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, _ = two_threads
    thread_scope = EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk)
    agent_scope = EntryScope(agent_id=alice.agent.pk)
    size, _ = keyword.entry_scope_sizes(thread_scope)
    assert size == 20
    # As the planner estimates the table: 20 rows among 1,000,000 are read exactly, among 5 walked.
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *thread_scope.cache_key): 1_000_000})
    assert read_exactly(thread_scope, 10)
    assert not read_exactly(agent_scope, 10)  # the agent's whole scope: always the walk
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *thread_scope.cache_key): 5})
    assert not read_exactly(thread_scope, 1)  # 400 > 40 x 1 x 5: the walk
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *thread_scope.cache_key): -1})
    assert not read_exactly(thread_scope, 10)  # a table never analysed: the walk, as before


@pytest.mark.django_db
def test_an_exact_read_is_the_scopes_nearest_rows_in_one_statement(
    alice: Any, two_threads: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other = two_threads
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk)
    keyword.entry_scope_sizes(scope)
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *scope.cache_key): 1_000_000})
    text = "How is the marathon training going?"
    with CaptureQueriesContext(connection) as queries:
        hits = vector_entries(scope=scope, vector=embed_query(text), limit=6)
    assert len(queries.captured_queries) == 1
    assert "hnsw" not in queries.captured_queries[0]["sql"]  # no walk, no SET LOCAL
    assert [round(h.score, 6) for h in hits] == [round(s, 6) for s in _exact_scores(scope, text)[:6]]
    other_ids = set(other.entries.values_list("id", flat=True))
    assert not other_ids & {h.id for h in hits}  # the scope holds: no row of the other thread
