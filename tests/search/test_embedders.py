"""Embedder providers: fake (deterministic), openai (a real local HTTP server), local (the real model)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from governance.models import JobRun
from memoryapp.models import Entry
from memoryapp.search.embedders import EmbedderError, FakeEmbedder, LocalEmbedder, OpenAIEmbedder, embedder
from memoryapp.search.indexing import entry_embedding_text
from memoryapp.search.space import THREAD_VECTORS_INDEX, column_dimensions, vector_space_status
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_fake_embedder_is_deterministic_normalized_and_puts_similar_words_close() -> None:
    fake = FakeEmbedder(384)
    [cook, cooking, chess] = fake.embed(["I cook pasta", "cooking pasta tonight", "a game of chess"])

    assert fake.embed(["I cook pasta"])[0] == cook
    assert math.isclose(sum(x * x for x in cook), 1.0, rel_tol=1e-9)
    assert len(cook) == 384
    assert _cosine(cook, cooking) > _cosine(cook, chess) + 0.2


def test_the_configured_embedder_follows_the_settings() -> None:
    assert isinstance(embedder(), FakeEmbedder)
    with override_settings(EMBEDDER="openai", EMBEDDING_URL="http://127.0.0.1:9/v1"):
        assert isinstance(embedder(), OpenAIEmbedder)
    with override_settings(EMBEDDER="local"):
        assert isinstance(embedder(), LocalEmbedder)


class _Endpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/embeddings that answers what the test queued."""

    answers: list[tuple[int, Any]] = []
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        type(self).bodies.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        status, payload = type(self).answers.pop(0) if type(self).answers else (200, None)
        if payload is None:
            payload = {
                "data": [
                    {"index": i, "embedding": [float(i + 1)] + [0.0] * (body["dimensions"] - 1)}
                    for i in range(len(body["input"]))
                ]
            }
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Endpoint.answers, _Endpoint.bodies = [], []
    server = HTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _openai(url: str) -> OpenAIEmbedder:
    return OpenAIEmbedder(url=url, model="text-embedding-3-small", api_key="sk-test", dimensions=8, timeout=5)


def test_the_openai_embedder_posts_model_input_and_dimensions_and_normalizes(endpoint: str) -> None:
    vectors = _openai(endpoint).embed(["a", "b"])

    assert vectors[0][0] == 1.0 and vectors[1][0] == 1.0  # normalized from 1.0 and 2.0
    sent = _Endpoint.bodies[0]
    assert sent["path"] == "/v1/embeddings" and sent["auth"] == "Bearer sk-test"
    assert sent["model"] == "text-embedding-3-small" and sent["input"] == ["a", "b"] and sent["dimensions"] == 8


def test_the_openai_embedder_retries_429_and_5xx_then_succeeds(endpoint: str) -> None:
    _Endpoint.answers = [(429, {"error": "slow down"}), (503, {"error": "busy"})]

    vectors = _openai(endpoint).embed(["a"])

    assert len(vectors) == 1 and len(_Endpoint.bodies) == 3


def test_the_openai_embedder_does_not_retry_a_client_error(endpoint: str) -> None:
    _Endpoint.answers = [(400, {"error": "bad model"})]

    with pytest.raises(EmbedderError, match="HTTP 400"):
        _openai(endpoint).embed(["a"])
    assert len(_Endpoint.bodies) == 1


def test_the_openai_embedder_gives_up_after_bounded_retries(endpoint: str) -> None:
    _Endpoint.answers = [(500, {})] * 10

    with pytest.raises(EmbedderError, match="gave up after 4 attempts"):
        _openai(endpoint).embed(["a"])
    assert len(_Endpoint.bodies) == 4


def test_the_openai_embedder_reports_a_wrong_dimension(endpoint: str) -> None:
    _Endpoint.answers = [(200, {"data": [{"index": 0, "embedding": [1.0, 0.0]}]})]

    with pytest.raises(EmbedderError, match="2 dimensions"):
        _openai(endpoint).embed(["a"])


def test_an_unreachable_openai_endpoint_is_an_embedder_error() -> None:
    dead = OpenAIEmbedder(url="http://127.0.0.1:9/v1", model="m", api_key="", dimensions=8, timeout=0.5)
    dead.retries = 1

    with pytest.raises(EmbedderError, match="gave up"):
        dead.embed(["a"])


def test_a_short_turn_is_embedded_with_the_turn_it_answers(alice: Any) -> None:
    thread = ThreadFactory(
        agent=alice.agent,
        turns=[
            {"role": "user", "content": "Did you go to Lisbon in May?", "sender_name": "Ana"},
            ("assistant", "Yes!"),
        ],
    )
    question, answer = Entry.objects.filter(thread=thread).order_by("seq")

    text = entry_embedding_text(entry=answer, previous=question)

    assert text.startswith("assistant said: Yes!")
    assert "in reply to Ana: Did you go to Lisbon in May?" in text


def test_reembed_rewrites_every_vector_as_a_job(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "one"), ("assistant", "two")])
    embedded(alice.agent)
    before = dict(Entry.objects.filter(agent=alice.agent).values_list("id", "embedded_at"))

    call_command("reembed", "--agent", alice.agent.slug, stdout=StringIO())

    run = JobRun.objects.get(kind="reembed")
    assert run.status == JobRun.Status.SUCCEEDED and run.result == {"embedded": 2, "passed_over": 0}
    after = dict(Entry.objects.filter(agent=alice.agent).values_list("id", "embedded_at"))
    assert all(after[i] > before[i] for i in before)


def test_a_reembed_job_whose_embedder_is_down_for_a_while_is_retried_and_finishes(
    alice: Any, endpoint: str, django_capture_on_commit_callbacks: Any
) -> None:
    """The first attempt gives up on an endpoint answering 500s; Celery's retry claims the same run
    (it went back to queued) and embeds everything."""
    from governance.jobs.broker import job_enqueue

    ThreadFactory(agent=alice.agent, turns=[("user", "one"), ("assistant", "two")])
    _Endpoint.answers = [(500, {})] * 4  # one attempt's worth: the embedder tries 4 times, then raises
    with (
        override_settings(EMBEDDER="openai", EMBEDDING_URL=endpoint, EMBEDDING_TIMEOUT=5),
        django_capture_on_commit_callbacks(execute=True),
    ):
        run = job_enqueue(
            kind="reembed",
            task_name="memoryapp.tasks.embed_all_again",
            arguments={"agent_id": alice.agent.pk},
            agent_id=alice.agent.pk,
        )
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED and run.attempts == 2, (run.status, run.error)
    assert run.result == {"embedded": 2, "passed_over": 0}
    assert Entry.objects.filter(agent=alice.agent, embedding__isnull=True).count() == 0


def test_reembed_dimensions_resizes_the_vector_columns_and_embeds_again(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=[("user", "one"), ("assistant", "two")])
    embedded(alice.agent)

    with override_settings(EMBEDDING_DIMENSIONS=16):
        assert not vector_space_status().ok
        call_command("reembed", "--dimensions", stdout=StringIO())
        assert column_dimensions() == 16 and vector_space_status().ok
        assert Entry.objects.filter(agent=alice.agent, embedding__isnull=True).count() == 0
        # A new type is a new storage: the vectors are kept in their rows again (migration 0053),
        # the entries' PLAIN with their thread index made again for 16 dimensions (migration 0059).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attrelid::regclass::text, attstorage FROM pg_attribute WHERE attname = 'embedding'"
                " AND attrelid IN ('memoryapp_entry'::regclass, 'memoryapp_memoryitem'::regclass)"
            )
            assert dict(cursor.fetchall()) == {"memoryapp_entry": "p", "memoryapp_memoryitem": "m"}
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [THREAD_VECTORS_INDEX])
            assert "INCLUDE (agent_id, id, created_at, embedding)" in cursor.fetchone()[0]
    # The test's transaction rolls the columns back to their dimension.


@pytest.mark.slow
def test_the_local_model_embeds_offline_and_puts_paraphrases_close() -> None:
    local = LocalEmbedder(384)

    [dog, puppy, tax] = local.embed(["I adopted a dog", "We got a new puppy", "Quarterly tax filing deadline"])

    assert len(dog) == 384 and math.isclose(sum(x * x for x in dog), 1.0, rel_tol=1e-4)
    assert _cosine(dog, puppy) > 0.4 > _cosine(dog, tax)
