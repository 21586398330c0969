"""The Gemini embedder against a local stand-in of the Gemini API (loopback only)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from memoryapp.models import Entry
from memoryapp.search.embedders import EmbedderError, GeminiEmbedder, embedder
from tests.kit.factories import ThreadFactory
from tests.kit.recall import by_text, embedded
from tests.kit.servers import GeminiEmbeddingServer

KEY = "gm-test-key"


@pytest.fixture
def gemini() -> Iterator[GeminiEmbeddingServer]:
    with GeminiEmbeddingServer(api_key=KEY).running() as server:
        yield server


def _gemini(server: GeminiEmbeddingServer, *, api_key: str = KEY, dimensions: int = 384) -> GeminiEmbedder:
    return GeminiEmbedder(
        url=server.url, model="gemini-embedding-001", api_key=api_key, dimensions=dimensions, timeout=5
    )


def test_one_text_is_an_embed_content_call_with_the_key_in_its_header(gemini: GeminiEmbeddingServer) -> None:
    [vector] = _gemini(gemini).embed(["I adopted a puppy"])

    assert len(vector) == 384 and math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-9)
    [seen] = gemini.seen
    assert seen.path == "/v1beta/models/gemini-embedding-001:embedContent"
    assert seen.headers["x-goog-api-key"] == KEY and "authorization" not in seen.headers
    assert seen.body == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "I adopted a puppy"}]},
        "outputDimensionality": 384,
    }


def test_many_texts_are_batch_calls_of_at_most_the_api_limit_in_order(gemini: GeminiEmbeddingServer) -> None:
    provider = _gemini(gemini)
    provider.batch_limit = 3
    texts = [f"text number {i}" for i in range(7)]

    vectors = provider.embed(texts)

    assert [s.path.rsplit(":", 1)[1] for s in gemini.seen] == ["batchEmbedContents"] * 3
    assert [len(s.body["requests"]) for s in gemini.seen] == [3, 3, 1]
    sent = [r["content"]["parts"][0]["text"] for s in gemini.seen for r in s.body["requests"]]
    assert sent == texts
    # Each text's vector is the one embedContent gives it alone: the order is kept.
    assert vectors[5] == provider.embed(["text number 5"])[0]


def test_a_wrong_key_is_an_embedder_error_without_retries(gemini: GeminiEmbeddingServer) -> None:
    with pytest.raises(EmbedderError, match="gemini: HTTP 403"):
        _gemini(gemini, api_key="wrong").embed(["a"])
    assert len(gemini.seen) == 1


def test_unavailable_is_retried_a_bounded_number_of_times(gemini: GeminiEmbeddingServer) -> None:
    gemini.failures = [503, 429]
    assert len(_gemini(gemini).embed(["a"])) == 1
    assert len(gemini.seen) == 3

    gemini.seen.clear()
    gemini.failures = [503] * 10
    with pytest.raises(EmbedderError, match="gemini: gave up after 4 attempts"):
        _gemini(gemini).embed(["a"])
    assert len(gemini.seen) == 4


def test_a_model_answering_fewer_dimensions_than_configured_is_reported() -> None:
    small = GeminiEmbeddingServer(api_key=KEY, native_dimensions=256)
    with small.running(), pytest.raises(EmbedderError, match="256 dimensions but EMBEDDING_DIMENSIONS is 384"):
        _gemini(small).embed(["a"])


def test_the_settings_choose_gemini_and_search_finds_entries_by_its_vectors(
    alice: Any, gemini: GeminiEmbeddingServer
) -> None:
    thread = ThreadFactory(
        agent=alice.agent,
        turns=[("user", "I adopted a puppy named Rex"), ("assistant", "My sister works as a nurse in Lisbon")],
    )
    settings: dict[str, Any] = {
        "EMBEDDER": "gemini",
        "EMBEDDING_URL": gemini.url,
        "EMBEDDING_MODEL": "gemini-embedding-001",
        "EMBEDDING_API_KEY": KEY,
        "EMBEDDING_TIMEOUT": 5,
    }
    with override_settings(**settings):
        assert isinstance(embedder(), GeminiEmbedder)
        assert embedded(alice.agent)["entries"] == 2
        answer = alice.client.post("/api/v1/search", {"text": "adopting puppies", "method": "vector"}, format="json")

    assert Entry.objects.filter(thread=thread, embedding__isnull=True).count() == 0
    assert answer.status_code == 200, answer.json()
    assert answer.json()["results"][0]["id"] == by_text(thread, "adopted a puppy").id
    paths = {s.path.rsplit(":", 1)[1] for s in gemini.seen}
    assert paths == {"batchEmbedContents", "embedContent"}  # the entries in a batch, the query alone
