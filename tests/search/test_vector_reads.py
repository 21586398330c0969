"""How the vector channel reads a scope: the HNSW walk, or exactly (issue 26, memoryapp.search.vector)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from memoryapp.search import keyword, vector
from memoryapp.search.embedders import embed_query
from memoryapp.search.scope import EntryScope
from memoryapp.search.space import THREAD_VECTORS_INDEX, vector_columns_resize
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
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *thread_scope.cache_key): 8})
    assert read_exactly(thread_scope, 1)  # 400 <= 80 x 1 x 8: the thread index reads a row for ~1/80 of a walk's
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *thread_scope.cache_key): 4})
    assert not read_exactly(thread_scope, 1)  # 400 > 80 x 1 x 4: the walk
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


def _plan_with_the_thread_index_alone(sql: str, params: dict[str, Any]) -> str:
    """The plan of `sql` once the table's other indexes are dropped (rolled back with the test; the
    primary key's kept) and scans of the whole table are off: whether the thread index serves it by
    itself, whatever a tiny table never vacuumed makes the planner prefer."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the writes' deferred checks would block ALTER TABLE
        cursor.execute("ALTER TABLE memoryapp_entry DROP CONSTRAINT entry_thread_seq_uniq")
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memoryapp_entry' AND indexname <> ALL(%s)",
            [["memoryapp_entry_pkey", THREAD_VECTORS_INDEX]],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(r[0] for r in cursor.fetchall())


@pytest.mark.django_db
def test_a_threads_exact_read_is_an_index_only_scan_of_its_vectors(alice: Any, two_threads: tuple[Any, Any]) -> None:
    # The thread's vectors come from an index of their own, not a heap visit per turn (issue 26,
    # migration 0059): its predicate is the scope's, and it holds every column the read uses.
    mine, _ = two_threads
    for scope in (
        EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk),
        EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk, before_seq=10),  # recall's
    ):
        where, params = scope.where("e")
        sql = (
            f"SELECT e.id, e.embedding <=> %(v)s::vector FROM memoryapp_entry e WHERE {where}"
            " AND e.embedding IS NOT NULL ORDER BY (e.embedding <=> %(v)s::vector) + 0 LIMIT 6"
        )
        with transaction.atomic():
            plan = _plan_with_the_thread_index_alone(
                sql, {**params, "v": vector.vector_literal(embed_query("marathon"))}
            )
            transaction.set_rollback(True)
        assert f"Index Only Scan using {THREAD_VECTORS_INDEX}" in plan, plan


@pytest.mark.django_db
def test_a_dimension_too_large_for_the_thread_index_reads_the_table(alice: Any) -> None:
    # A B-tree row holds ~2.7 kB: 1,000 dimensions (4 kB) have no thread index, and the column
    # keeps MAIN; the thread's exact read is then the table's, as before (rolled back with the test).
    vector_columns_resize(1000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [THREAD_VECTORS_INDEX])
        assert cursor.fetchone()[0] == 0
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memoryapp_entry'::regclass AND attname = 'embedding'"
        )
        assert cursor.fetchone()[0] == "m"


@pytest.mark.django_db
def test_a_condition_over_the_nearest_rows_kept_answers_what_its_own_exact_read_answers(
    alice: Any, two_threads: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The time, entity and speaker channels rank the scope's rows meeting a condition by the vector:
    # from the vector channel's nearest rows when `limit` of them meet it (one look-up by id), else
    # by their own exact read, with the same rows and scores either way (issue 26).
    mine, other = two_threads
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk)
    keyword.entry_scope_sizes(scope)
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *scope.cache_key): 1_000_000})
    monkeypatch.setattr(vector, "NEAREST_KEPT", 8)  # fewer than the thread's 20 rows
    question = embed_query("How is the marathon training going?")
    other_question = embed_query("What about the puppy walk?")

    def ranked(condition: str, params: dict[str, Any], memo: dict[str, Any] | None, limit: int = 3) -> Any:
        with CaptureQueriesContext(connection) as queries:
            hits = vector.nearest_matching(
                scope=scope, condition=condition, params=params, vector=question, limit=limit, walk=False, memo=memo
            )
        return [(h.id, round(h.score, 9)) for h in hits], [q["sql"] for q in queries.captured_queries]

    memo: dict[str, Any] = {}
    assert len(vector_entries(scope=scope, vector=question, limit=3, memo=memo)) == 3
    for condition, params, from_kept in (
        ("e.seq >= %(low)s", {"low": 1}, True),  # every row meets it: the nearest rows answer
        ("e.seq <= %(top)s", {"top": 2}, False),  # two rows meet it: fewer than 3, read again
    ):
        alone, _ = ranked(condition, params, None)
        kept, sql = ranked(condition, params, memo)
        assert kept == alone and kept
        assert len(sql) == (1 if from_kept else 2) and "e.id = ANY(" in sql[0]
    assert not {i for i, _ in kept} & set(other.entries.values_list("id", flat=True))
    # The nearest rows of another vector, or of another scope, are not read.
    for stale in (
        {"vector.nearest": (scope, vector.vector_literal(other_question), *memo["vector.nearest"][2:])},
        {"vector.nearest": (EntryScope(agent_id=alice.agent.pk), *memo["vector.nearest"][1:])},
    ):
        assert ranked("e.seq >= %(low)s", {"low": 1}, stale) == ranked("e.seq >= %(low)s", {"low": 1}, None)
    # Nearest rows that are the whole scope answer even when fewer than `limit` meet the condition.
    monkeypatch.setattr(vector, "NEAREST_KEPT", 50)
    whole: dict[str, Any] = {}
    vector_entries(scope=scope, vector=question, limit=3, memo=whole)
    kept, sql = ranked("e.seq <= %(top)s", {"top": 2}, whole)
    assert kept == ranked("e.seq <= %(top)s", {"top": 2}, None)[0] and len(kept) == 2 and len(sql) == 1
