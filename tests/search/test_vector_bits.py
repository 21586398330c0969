"""A thread's nearest turns by their vectors' sign bits, then by the vectors (issue 26, migration 0063).

The bits (`embedding_bits`, memoryapp.search.space.QUANTIZED_COLUMN) are written by a trigger with
every write of the vector; a thread read exactly compares the bits of all its rows and the full
vectors of the best candidates only. These tests pin that the bits follow the vector at every write,
that the approximate read keeps the scope and finds what the exact read finds, and that rows
without bits (embedded before the migration) are still compared."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from memoryapp.forgetting.services import entry_redact
from memoryapp.models import Entry
from memoryapp.search import embedders, keyword, vector
from memoryapp.search.embedders import embed_query
from memoryapp.search.indexing import embed_entries_batch
from memoryapp.search.scope import EntryScope
from memoryapp.search.space import (
    BITS_PENDING_INDEX,
    QUANTIZED_COLUMN,
    THREAD_BITS_INDEX,
    vector_columns_resize,
    vectors_quantize,
)
from memoryapp.search.vector import vector_entries
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded

TOPICS = ("garden tomatoes", "marathon training", "mortgage interest", "pasta sauce", "puppy walk")


def bits_of(ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """Each row's stored bits and the bits of its vector as computed now."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, {QUANTIZED_COLUMN}::text, binary_quantize(embedding)::text FROM memoryapp_entry"
            " WHERE id = ANY(%s)",
            [ids],
        )
        return {r[0]: (r[1], r[2]) for r in cursor.fetchall()}


def exact_nearest(scope: EntryScope, vector_: list[float], limit: int) -> list[tuple[str, float]]:
    """The scope's `limit` nearest rows, every row compared: (id, cosine), best first. No index
    scan: the planner may otherwise walk the HNSW index for the ORDER BY (after a test that filled
    the table, in a whole run), an approximate read that a thread's filter can leave empty."""
    where, params = scope.where("e")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute(
            f"SELECT e.id, 1 - (e.embedding <=> %(v)s::vector) FROM memoryapp_entry e WHERE {where}"
            " AND e.embedding IS NOT NULL ORDER BY e.embedding <=> %(v)s::vector, e.id LIMIT %(n)s",
            {**params, "v": vector.vector_literal(vector_), "n": limit},
        )
        return [(r[0], float(r[1])) for r in cursor.fetchall()]


def same_nearest(hits: list[Any], exact: list[tuple[str, float]]) -> bool:
    """The same rows as the exact read, in its order; rows of equal distance in either order (the
    fake embedder's turns tie), so the scores are compared, and the rows of every score but the last."""
    if [round(h.score, 6) for h in hits] != [round(s, 6) for _, s in exact]:
        return False
    last = round(exact[-1][1], 6) if exact else None
    return {h.id for h in hits if round(h.score, 6) != last} == {i for i, s in exact if round(s, 6) != last}


def read_by_bits(monkeypatch: pytest.MonkeyPatch, scope: EntryScope, candidates: int | None = None) -> None:
    """The scope read exactly (as in a large table), by its bits: from `candidates` candidates, or
    as many as the search takes."""
    keyword.entry_scope_sizes(scope)
    monkeypatch.setattr(keyword, "_table_rows", {("entries", *scope.cache_key): 1_000_000})
    monkeypatch.setattr(vector, "QUANTIZED_READ", True)  # the fake embedder's vectors too
    if candidates is not None:
        monkeypatch.setattr(vector, "CANDIDATES_MIN", candidates)
        monkeypatch.setattr(vector, "CANDIDATES_PER_ROW", 1)


@pytest.fixture
def two_threads(alice: Any) -> tuple[Any, Any]:
    mine = ThreadFactory(
        agent=alice.agent, external_id="t-mine", turns=[("user", f"My {t} note {i}") for i in range(6) for t in TOPICS]
    )
    other = ThreadFactory(
        agent=alice.agent, external_id="t-other", turns=[("user", f"Other {t} {i}") for i in range(8) for t in TOPICS]
    )
    embedded(alice.agent)
    return mine, other


@pytest.mark.django_db
def test_the_bits_follow_the_vector_at_every_write(alice: Any, two_threads: tuple[Any, Any]) -> None:
    mine, _ = two_threads
    ids = list(mine.entries.order_by("seq").values_list("id", flat=True))
    # The embedding job's write: every row has the bits of its vector.
    found = bits_of(ids)
    assert all(stored is not None and stored == computed for stored, computed in found.values()), found
    # Another vector (as `reembed` or an erasure's re-embedding writes it): the bits follow.
    Entry.objects.filter(pk=ids[0]).update(embedding=[(-1.0) ** i / 20 for i in range(384)])
    stored, computed = bits_of([ids[0]])[ids[0]]
    assert stored == computed == "10" * 192
    embed_entries_batch([Entry.objects.get(pk=ids[0])], overwrite=True)
    stored, computed = bits_of([ids[0]])[ids[0]]
    assert stored == computed and stored != "10" * 192
    # Bits written by hand cannot disagree with the vector: they are computed again.
    Entry.objects.filter(pk=ids[1]).update(embedding=[0.05] * 384)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE memoryapp_entry SET {QUANTIZED_COLUMN} = B'0' WHERE id = %s", [ids[1]])
    assert bits_of([ids[1]])[ids[1]] == ("1" * 384, "1" * 384)
    # A redaction takes the vector, and the bits with it.
    entry_redact(entry=Entry.objects.get(pk=ids[2]), reason="test", keep_replies=True)
    assert bits_of([ids[2]])[ids[2]] == (None, None)
    # A row inserted with its vector (a COPY, an import) has its bits at once.
    row = Entry.objects.get(pk=ids[-1])
    row.pk, row.seq, row.parent_id = "ent_bits_copy", 10_000, None
    row.save(force_insert=True)
    assert bits_of(["ent_bits_copy"])["ent_bits_copy"][0] == bits_of([ids[-1]])[ids[-1]][0] is not None


@pytest.mark.django_db
def test_a_sealed_turn_has_the_bits_of_its_vector(encrypted: Any, alice: Any) -> None:  # noqa: F811
    thread = ThreadFactory(agent=alice.agent, turns=[("user", "The marathon training hurts my knee")])
    embedded(alice.agent)
    entry = Entry.objects.get(thread=thread)
    with connection.cursor() as cursor:
        cursor.execute("SELECT text LIKE 'enc:v1:%%' FROM memoryapp_entry WHERE id = %s", [entry.pk])
        assert cursor.fetchone()[0]  # sealed; its vector, and so its bits, are not
    stored, computed = bits_of([entry.pk])[entry.pk]
    assert stored is not None and stored == computed


@pytest.mark.django_db
def test_a_thread_read_by_its_bits_keeps_the_scope_and_finds_the_exact_nearest(
    alice: Any, two_threads: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, other = two_threads
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk)
    # 20 candidates of the thread's 30 rows: the fake embedder's vectors are sparse (a few dozen
    # dimensions not 0), so their bits tell little apart; how often the bits find the exact top 10
    # with the real model is the LoCoMo test's (below).
    read_by_bits(monkeypatch, scope, candidates=20)
    other_ids = set(other.entries.values_list("id", flat=True))
    for topic in TOPICS:
        question = embed_query(f"What about the {topic}?")
        with CaptureQueriesContext(connection) as queries:
            hits = vector_entries(scope=scope, vector=question, limit=5)
        assert len(queries.captured_queries) == 1 and QUANTIZED_COLUMN in queries.captured_queries[0]["sql"]
        assert same_nearest(hits, exact_nearest(scope, question, 5)), topic
        assert not other_ids & {h.id for h in hits}
    # A person's threads and recall's scope (the turns before the window) are read the same way.
    for narrower in (
        EntryScope(agent_id=alice.agent.pk, user_id=mine.user_id),
        EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk, before_seq=20),
    ):
        read_by_bits(monkeypatch, narrower, candidates=20 if narrower.user_id is None else 45)
        question = embed_query("marathon training")
        assert same_nearest(
            vector_entries(scope=narrower, vector=question, limit=5), exact_nearest(narrower, question, 5)
        )


@pytest.mark.django_db
def test_rows_without_bits_are_compared_by_their_vectors_until_quantized(
    alice: Any, two_threads: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows embedded before migration 0063 have no bits: the search compares them whole, and
    # `vectors_quantize` gives them their bits.
    mine, _ = two_threads
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk)
    read_by_bits(monkeypatch, scope, candidates=3)
    question = embed_query("How is the marathon training going?")
    best = exact_nearest(scope, question, 5)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the writes' deferred checks would block ALTER TABLE
        cursor.execute("ALTER TABLE memoryapp_entry DISABLE TRIGGER entry_embedding_bits_update")
        cursor.execute(f"UPDATE memoryapp_entry SET {QUANTIZED_COLUMN} = NULL WHERE agent_id = %s", [alice.agent.pk])
        cursor.execute("ALTER TABLE memoryapp_entry ENABLE TRIGGER entry_embedding_bits_update")
    assert same_nearest(vector_entries(scope=scope, vector=question, limit=5), best)
    out = StringIO()
    call_command("vectors_quantize", "--agent", alice.agent.slug, "--batch", "7", stdout=out)
    assert "memoryapp_entry: 70 vectors given their sign bits" in out.getvalue()
    found = bits_of(list(mine.entries.values_list("id", flat=True)))
    assert all(stored is not None and stored == computed for stored, computed in found.values())
    assert vectors_quantize(agent_id=alice.agent.pk) == 0  # nothing left: a second run writes nothing


@pytest.mark.django_db
def test_a_threads_bits_are_read_by_an_index_only_scan(alice: Any, two_threads: tuple[Any, Any]) -> None:
    mine, _ = two_threads
    scope = EntryScope(agent_id=alice.agent.pk, thread_pk=mine.pk)
    sql = vector._quantized_nearest(scope)
    _, params = scope.where("e")
    with transaction.atomic(), connection.cursor() as cursor:
        # The table's other indexes dropped (rolled back with the test; the primary key kept) and
        # scans of the whole table off: whether the bits' index serves it by itself, whatever a
        # tiny table never vacuumed makes the planner prefer.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE memoryapp_entry DROP CONSTRAINT entry_thread_seq_uniq")
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memoryapp_entry' AND indexname <> ALL(%s)",
            [["memoryapp_entry_pkey", THREAD_BITS_INDEX, BITS_PENDING_INDEX]],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
        cursor.execute(
            f"EXPLAIN {sql}", {**params, "v": vector.vector_literal(embed_query("marathon")), "n": 5, "m": 12}
        )
        plan = "\n".join(r[0] for r in cursor.fetchall())
        transaction.set_rollback(True)
    assert f"Index Only Scan using {THREAD_BITS_INDEX}" in plan, plan


@pytest.mark.django_db
def test_a_new_dimension_takes_the_bits_with_the_vectors(alice: Any, two_threads: tuple[Any, Any]) -> None:
    vector_columns_resize(128)  # an ALTER's rewrite fires no trigger: the bits are cleared with the vectors
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM memoryapp_entry WHERE {QUANTIZED_COLUMN} IS NOT NULL")
        assert cursor.fetchone()[0] == 0


@pytest.mark.slow
@pytest.mark.django_db
def test_on_a_real_conversation_the_bits_find_the_exact_top_10(alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # LoCoMo's 2,760 turns in one thread, the default local model, LoCoMo's questions: the top 10 by
    # the bits' candidates (the search's 400) and the exact top 10 are the same rows for nearly every
    # question (offline, 994 of 999; the candidates' count matters, not their share of the thread:
    # the same with 7,240 LongMemEval turns added, docs/recall-and-context.md).
    from tests.kit.locomo_threads import locomo_questions, locomo_thread

    monkeypatch.setattr(embedders, "_local_model", None)
    embedders.query_cache_clear()
    with override_settings(EMBEDDER="local", EMBEDDING_MODEL="all-MiniLM-L6-v2-q8"):
        thread = locomo_thread(agent=alice.agent, external_id="t-locomo", turns=2760)
        embedded(alice.agent)
        scope = EntryScope(agent_id=alice.agent.pk, thread_pk=thread.pk)
        read_by_bits(monkeypatch, scope)
        monkeypatch.setattr(vector, "QUANTIZED_READ", None)  # the model's own choice: on for MiniLM
        assert vector.quantized_read()
        questions = locomo_questions()
        same = 0
        for question in questions:
            query = embed_query(question)
            same += same_nearest(vector_entries(scope=scope, vector=query, limit=10), exact_nearest(scope, query, 10))
    embedders.query_cache_clear()
    assert len(questions) > 900
    assert same >= 0.98 * len(questions), f"{same} of {len(questions)}"


@pytest.mark.django_db
def test_only_the_models_measured_are_read_by_their_bits(alice: Any, two_threads: tuple[Any, Any]) -> None:
    with override_settings(EMBEDDER="local", EMBEDDING_MODEL="all-MiniLM-L6-v2-q8"):
        assert vector.quantized_read()
    with override_settings(EMBEDDER="local", EMBEDDING_MODEL="multilingual-e5-small-q4"):
        assert not vector.quantized_read()
    with override_settings(EMBEDDER="openai", EMBEDDING_MODEL="text-embedding-3-small"):
        assert not vector.quantized_read()
    assert not vector.quantized_read()  # the tests' fake embedder: every vector compared, as before
