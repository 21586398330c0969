"""Search: keyword, vector and hybrid over an agent's entries and items, scoped before anything."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from governance.models import JobRun
from memoryapp.forgetting.services import entry_redact
from memoryapp.models import Entry
from memoryapp.search import embedders, retrieval, vector
from memoryapp.search.indexing import embed_pending, embedding_schedule
from memoryapp.search.scope import EntryScope
from memoryapp.threads import services as threads_services
from tests.kit.concurrency import in_threads, started
from tests.kit.factories import MemoryItemFactory, ThreadFactory
from tests.kit.recall import FailingEmbedder, by_text, embedded

DOG_TURNS = [
    ("user", "I adopted a puppy named Rex last May"),
    ("assistant", "How lovely! What breed is Rex?"),
    ("user", "A golden retriever, he loves swimming in the lake"),
    ("assistant", "Swimming is great exercise for retrievers."),
    ("user", "My sister lives in Lisbon and works as a nurse"),
]


def _search(caller: Any, **body: Any) -> Any:
    return caller.client.post("/api/v1/search", body, format="json")


@pytest.fixture
def failing_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedders, "embedder", lambda: FailingEmbedder("embedding endpoint answered 429"))


def test_an_entry_is_found_by_keyword_before_the_embedding_job_ran(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    assert not Entry.objects.filter(thread=thread, embedding__isnull=False).exists()

    answer = _search(alice, text="Which lake does the retriever swim in?", method="hybrid")

    assert answer.status_code == 200, answer.json()
    results = answer.json()["results"]
    assert results[0]["id"] == by_text(thread, "golden retriever").id
    assert "keyword" in results[0]["channels"] and "vector" not in results[0]["channels"]
    assert answer.json()["errors"] == []


def test_vector_search_finds_entries_once_the_embedding_job_ran(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    assert _search(alice, text="puppy adopted", method="vector").json()["results"] == []

    result = embedded(alice.agent)

    assert result["entries"] == len(DOG_TURNS)
    hits = _search(alice, text="adopting a puppy", method="vector").json()["results"]
    assert hits[0]["id"] == by_text(thread, "adopted a puppy").id
    assert hits[0]["channels"] == ["vector"]
    assert 0 < hits[0]["score"] <= 1


def test_a_hybrid_hit_found_by_both_channels_says_so_and_comes_first(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)

    body = _search(alice, text="Where does my sister live and work?", limit=3).json()

    first = body["results"][0]
    assert first["id"] == by_text(thread, "sister lives").id
    assert {"keyword", "vector"} <= set(first["channels"])
    assert first["kind"] == "entry" and first["thread_id"] == "t-1" and first["seq"] == 5
    assert len(body["results"]) <= 3


def test_the_embedding_job_embeds_nothing_twice_and_records_a_job_run(
    alice: Any, django_capture_on_commit_callbacks: Any
) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    with django_capture_on_commit_callbacks(execute=True):
        embedding_schedule(agent_id=alice.agent.pk)

    run = JobRun.objects.get(kind="embedding", agent_id=alice.agent.pk)
    assert run.status == JobRun.Status.SUCCEEDED
    assert run.result["entries"] == len(DOG_TURNS)
    assert Entry.objects.filter(agent=alice.agent, embedding__isnull=True).count() == 0
    first_times = dict(Entry.objects.filter(agent=alice.agent).values_list("id", "embedded_at"))

    assert embedded(alice.agent)["entries"] == 0
    assert dict(Entry.objects.filter(agent=alice.agent).values_list("id", "embedded_at")) == first_times


@pytest.mark.django_db(transaction=True)
@override_settings(EMBEDDING_BATCH_SIZE=4)
def test_concurrent_embedding_runs_take_different_batches(alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two runs for one agent at once (a write landed after the first run started): each batch
    # is claimed while it is embedded, so no text is embedded twice and both runs share the work.
    turns = [("user", f"turn number {n} about the garden") for n in range(16)]
    with monkeypatch.context() as patched:
        patched.setattr(threads_services, "after_entries_added", lambda *, thread, entries: None)
        ThreadFactory(agent=alice.agent, turns=turns)
    fake = embedders.embedder()
    embedded_texts: list[str] = []
    lock = threading.Lock()

    class SlowEmbedder:
        name, dimensions = fake.name, fake.dimensions

        def embed(self, texts: list[str]) -> list[list[float]]:
            with lock:
                embedded_texts.extend(texts)
            time.sleep(0.05)
            return fake.embed(texts)

    monkeypatch.setattr(embedders, "embedder", lambda: SlowEmbedder())
    results = in_threads(lambda: embed_pending(agent_id=alice.agent.pk), lambda: embed_pending(agent_id=alice.agent.pk))
    assert all(isinstance(r, dict) for r in results), results
    assert len(embedded_texts) == len(turns)
    assert sorted(r["entries"] for r in results)[0] > 0 and sum(r["entries"] for r in results) == len(turns)
    assert Entry.objects.filter(agent=alice.agent, embedding__isnull=True).count() == 0


@pytest.mark.parametrize("seconds", [1.0, 7.0])
def test_the_embedding_job_waits_the_debounce_seconds_for_the_writes_that_join_it(
    alice: Any, seconds: float, settings: Any
) -> None:
    settings.EMBEDDING_DEBOUNCE_SECONDS = seconds
    before = timezone.now()
    embedding_schedule(agent_id=alice.agent.pk)
    run = JobRun.objects.get(kind="embedding", agent_id=alice.agent.pk)
    assert run.eta is not None
    assert before + timedelta(seconds=seconds) <= run.eta <= timezone.now() + timedelta(seconds=seconds)


@override_settings(EMBEDDING_BATCH_SIZE=4)
@pytest.mark.parametrize("turns", [3, 4, 6])
def test_a_run_looks_for_more_entries_only_after_a_full_batch(alice: Any, turns: int) -> None:
    # A batch of fewer rows than the batch size took every row pending when it read them: the run
    # stops there (the writes made since sent a run of their own), and never reads the rows twice.
    ThreadFactory(agent=alice.agent, turns=[("user", f"turn {n} about the garden") for n in range(turns)])
    with CaptureQueriesContext(connection) as queries:
        result = embed_pending(agent_id=alice.agent.pk)
    assert result["entries"] == turns
    assert Entry.objects.filter(agent=alice.agent, embedding__isnull=True).count() == 0
    reads = [q["sql"] for q in queries.captured_queries if 'FROM "memoryapp_entry"' in q["sql"] and "LIMIT" in q["sql"]]
    assert len(reads) == turns // 4 + 1  # full batches, then the one that was not full (or found none)


@pytest.mark.django_db(transaction=True)
def test_a_redaction_never_waits_for_the_embedder_and_the_old_vector_is_not_stored(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(threads_services, "after_entries_added", lambda *, thread, entries: None)
        thread = ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    target = by_text(thread, "sister lives in Lisbon")
    fake = embedders.embedder()
    embedding, release = threading.Event(), threading.Event()

    class HeldEmbedder:
        name, dimensions = fake.name, fake.dimensions

        def embed(self, texts: list[str]) -> list[list[float]]:
            embedding.set()
            release.wait(10)
            return fake.embed(texts)

    monkeypatch.setattr(embedders, "embedder", lambda: HeldEmbedder())
    errors: list[BaseException] = []
    job = started(lambda: embed_pending(agent_id=alice.agent.pk), errors)
    assert embedding.wait(10)
    redaction = started(lambda: entry_redact(entry=Entry.objects.get(pk=target.pk), reason="asked"), errors)
    redaction.join(10)
    finished_while_the_model_ran = not redaction.is_alive()
    release.set()
    job.join(10)
    assert errors == [] and finished_while_the_model_ran
    target.refresh_from_db()
    assert target.redacted_at is not None and target.embedding is None
    assert Entry.objects.filter(agent=alice.agent, embedding__isnull=True).count() == 1


def test_a_short_hnsw_walk_is_completed_by_an_exact_read_of_a_small_scope(
    alice: Any, bob: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a large table the graph walk can stop (hnsw.max_scan_tuples) before it has found the rows
    # of a small scope; starved here to one tuple, the channel must still answer the whole scope.
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    ThreadFactory(
        agent=bob.agent, turns=[("user", f"bob's own turn {n} about a puppy") for n in range(200)], external_id="b"
    )
    embedded(alice.agent)
    embedded(bob.agent)
    real_tune = vector._tune_hnsw

    def starved(cursor: Any, limit: int) -> None:
        real_tune(cursor, limit)
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")  # the graph gives the order: use it
        cursor.execute("SET LOCAL hnsw.max_scan_tuples = 1")

    monkeypatch.setattr(vector, "_tune_hnsw", starved)
    hits = vector.vector_entries(
        scope=EntryScope(agent_id=alice.agent.pk), vector=embedders.embed_query("my puppy"), limit=10
    )
    assert {h.id for h in hits} == set(Entry.objects.filter(agent=alice.agent).values_list("id", flat=True))
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_redacted_entries_are_not_embedded(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    entry_redact(entry=by_text(thread, "sister lives"))

    embedded(alice.agent)

    assert Entry.objects.filter(agent=alice.agent, embedding__isnull=False).count() == len(DOG_TURNS) - 1


def test_mallory_finds_nothing_of_alices_and_her_thread_answers_404(alice: Any, mallory: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    ThreadFactory(agent=mallory.agent, turns=[("user", "I like chess")], external_id="m-1")

    for method in ("keyword", "vector", "hybrid"):
        hits = _search(mallory, text="golden retriever puppy sister Lisbon", method=method).json()["results"]
        assert all(hit["thread_id"] == "m-1" for hit in hits), method

    answer = _search(mallory, text="retriever", thread_id="t-1")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


def test_search_is_limited_to_the_thread_or_the_person_asked(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "The lake house is blue")], external_id="t-ana", user_id="u-ana")
    ThreadFactory(agent=alice.agent, turns=[("user", "The lake house is red")], external_id="t-ben", user_id="u-ben")

    in_thread = _search(alice, text="lake house", thread_id="t-ben").json()["results"]
    for_ana = _search(alice, text="lake house", user_id="u-ana").json()["results"]
    everywhere = _search(alice, text="lake house").json()["results"]

    assert [h["thread_id"] for h in in_thread] == ["t-ben"]
    assert [h["thread_id"] for h in for_ana] == ["t-ana"]
    assert sorted(h["thread_id"] for h in everywhere) == ["t-ana", "t-ben"]


def test_a_threads_search_finds_the_items_of_its_project_and_none_of_another_project(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, external_id="t-garden", metadata={"project_id": "p-garden"})
    ThreadFactory(agent=alice.agent, external_id="t-plain")
    ours = MemoryItemFactory(agent=alice.agent, attribute="soil", value="clay soil by the shed", project_id="p-garden")
    MemoryItemFactory(agent=alice.agent, attribute="oven", value="clay oven by the shed", project_id="p-kitchen")

    in_project = _search(alice, text="clay shed", thread_id="t-garden", kinds=["items"]).json()["results"]
    outside = _search(alice, text="clay shed", thread_id="t-plain", kinds=["items"]).json()["results"]

    assert [r["id"] for r in in_project] == [ours.id]
    assert outside == []


def test_items_are_found_when_active_and_never_when_suggested(alice: Any) -> None:
    MemoryItemFactory(agent=alice.agent, attribute="city", value="lives in Porto", user_id="")
    suggested = MemoryItemFactory(
        agent=alice.agent, kind="preference", attribute="diet", value="vegetarian, strictly", trust="model", user_id=""
    )
    assert suggested.status == "suggested"

    results = _search(alice, text="Porto vegetarian diet city", kinds=["items"]).json()["results"]

    assert [r["text"] for r in results] == ["Ana city: lives in Porto"]
    assert results[0]["kind"] == "item" and results[0]["item_kind"] == "fact"


def test_search_falls_back_to_keyword_when_the_embedder_fails(alice: Any, failing_embedder: None) -> None:
    thread = ThreadFactory(agent=alice.agent, turns=DOG_TURNS)

    for method in ("vector", "hybrid"):
        body = _search(alice, text="golden retriever", method=method).json()
        assert body["results"][0]["id"] == by_text(thread, "golden retriever").id
        assert body["errors"][0]["source"] == "embedder"
        assert "429" in body["errors"][0]["message"]
        assert body["warnings"]


def test_a_vector_space_mismatch_is_reported_and_search_answers_by_keyword(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    retrieval._space_checked = None
    try:
        with override_settings(EMBEDDING_DIMENSIONS=768):
            body = _search(alice, text="golden retriever").json()
    finally:
        retrieval._space_checked = None

    assert body["results"] and body["results"][0]["channels"][0] == "keyword"
    assert body["errors"][0]["source"] == "vector"
    assert "reembed --dimensions" in body["errors"][0]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "text"),
        ({"text": ""}, "text"),
        ({"text": "x", "limit": 0}, "limit"),
        ({"text": "x", "limit": 101}, "limit"),
        ({"text": "x", "method": "magic"}, "method"),
        ({"text": "x", "kinds": ["files"]}, "kinds"),
        ({"text": "x", "colour": "red"}, "colour"),
    ],
)
def test_bad_search_input_is_a_400_naming_the_field(alice: Any, body: dict[str, Any], field: str) -> None:
    answer = _search(alice, **body)

    assert answer.status_code == 400
    assert answer.json()["error"]["field"].split(".")[0] == field


def test_search_needs_an_agent_key(anonymous: Any) -> None:
    assert anonymous.post("/api/v1/search", {"text": "x"}, format="json").status_code in (401, 403)


def test_stop_words_alone_find_nothing(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)

    assert _search(alice, text="what is the", method="keyword").json()["results"] == []
