"""The bundled local models (EMBEDDER=local, EMBEDDING_MODEL): multilingual-e5-small from its
package, offline, queries written as e5 wants them in one place; `reembed` moving every stored
vector (turns, items, knowledge chunks) to the model configured now; a name no package ships
refused at start."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from memoryapp.knowledge.services import knowledge_document_add
from memoryapp.models import Entry, KnowledgeChunk, MemoryItem
from memoryapp.search import embedders
from memoryapp.search.embedders import E5SmallModel, LocalEmbedder, embed_query, embed_texts
from tests.kit.factories import MemoryItemFactory, ThreadFactory
from tests.kit.recall import embedded

E5 = "multilingual-e5-small-q4"
ROOT = Path(__file__).resolve().parents[2]


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture
def e5(monkeypatch: pytest.MonkeyPatch) -> Any:
    """EMBEDDER=local with the e5 model, loaded afresh in this process for the test."""
    monkeypatch.setattr(embedders, "_local_model", None)
    embedders.query_cache_clear()
    with override_settings(EMBEDDER="local", EMBEDDING_MODEL=E5):
        yield
    embedders.query_cache_clear()


def test_the_e5_model_loads_from_its_package_without_the_network(e5: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the model tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)

    [dog, puppy, tax] = embed_texts(["I adopted a dog", "We got a new puppy", "Quarterly tax filing deadline"])

    assert isinstance(embedders._local_model, E5SmallModel)
    assert len(dog) == 384 and math.isclose(sum(x * x for x in dog), 1.0, rel_tol=1e-4)
    assert _cosine(dog, puppy) > _cosine(dog, tax)


def test_a_query_is_embedded_as_a_query_and_a_turn_as_a_passage(e5: None) -> None:
    question = "Which city does my sister live in?"
    stored = embed_texts([question])[0]
    asked = embed_query(question)

    # The same words, written for e5 as a question ("query: ") and as a passage ("passage: ").
    model = embedders._load_local_model()
    assert asked == pytest.approx(model.queries([question])[0], abs=1e-6)
    assert stored == pytest.approx(model.documents([question])[0], abs=1e-6)
    assert _cosine(asked, stored) < 0.999
    # And the question finds the turn that answers it before one that does not.
    [answer, other] = embed_texts(["My sister moved to Lisbon last spring.", "The printer is out of paper again."])
    assert _cosine(asked, answer) > _cosine(asked, other)


def test_minilm_embeds_a_query_as_it_embeds_a_turn() -> None:
    with override_settings(EMBEDDER="local", EMBEDDING_MODEL="all-MiniLM-L6-v2"):
        local = LocalEmbedder(384)
        text = "Which city does my sister live in?"
        assert local.embed_queries([text])[0] == pytest.approx(local.embed([text])[0], abs=1e-6)


def test_reembed_moves_turns_items_and_knowledge_chunks_to_the_model_configured_now(alice: Any, e5: None) -> None:
    with override_settings(EMBEDDER="fake"):
        ThreadFactory(agent=alice.agent, turns=[("user", "My sister lives in Lisbon."), ("assistant", "Lovely!")])
        item = MemoryItemFactory(agent=alice.agent, subject="Ana", attribute="sister's city", value="Lisbon")
        embedded(alice.agent)
        document = knowledge_document_add(
            agent=alice.agent, name="handbook", content="Refunds are paid within fourteen days of the return."
        )
        fake_vectors = {
            "entries": dict(Entry.objects.filter(agent=alice.agent).values_list("id", "embedding")),
            "items": dict(MemoryItem.objects.filter(agent=alice.agent).values_list("id", "embedding")),
            "chunks": dict(KnowledgeChunk.objects.filter(document=document).values_list("id", "embedding")),
        }
    assert all(v is not None for kind in fake_vectors.values() for v in kind.values()), fake_vectors
    assert fake_vectors["chunks"] and fake_vectors["items"]

    call_command("reembed", "--agent", alice.agent.slug, stdout=StringIO())

    for chunk in KnowledgeChunk.objects.filter(document=document):
        assert list(chunk.embedding) == pytest.approx(embed_texts([chunk.text])[0], abs=1e-5)
        assert list(chunk.embedding) != pytest.approx(list(fake_vectors["chunks"][chunk.id]), abs=1e-3)
    for entry_id, vector in Entry.objects.filter(agent=alice.agent).values_list("id", "embedding"):
        assert list(vector) != pytest.approx(list(fake_vectors["entries"][entry_id]), abs=1e-3)
    item.refresh_from_db()
    assert list(item.embedding) != pytest.approx(list(fake_vectors["items"][item.id]), abs=1e-3)
    # The chunk's new vector is e5's: the question finds it by meaning.
    chunk = KnowledgeChunk.objects.get(document=document)
    assert _cosine(embed_query("How long until I get my money back?"), list(chunk.embedding)) > 0.8


def test_reembed_dimensions_rebuilds_the_knowledge_chunks_column_too(alice: Any) -> None:
    document = knowledge_document_add(agent=alice.agent, name="handbook", content="Refunds within fourteen days.")

    with override_settings(EMBEDDING_DIMENSIONS=16):
        call_command("reembed", "--dimensions", stdout=StringIO())
        chunk = KnowledgeChunk.objects.get(document=document)
        assert chunk.embedding is not None and len(chunk.embedding) == 16
    # The test's transaction rolls the columns back to their dimension.


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            {"EMBEDDER": "local", "EMBEDDING_MODEL": "bge-small-en-v1.5"},
            "EMBEDDING_MODEL must be one of all-MiniLM-L6-v2-q8, all-MiniLM-L6-v2, all-MiniLM-L6-v2-int8,"
            " multilingual-e5-small-q4 with EMBEDDER=local,"
            " not 'bge-small-en-v1.5'",
        ),
        ({"EMBEDDER": "e5"}, "EMBEDDER must be one of local, openai, gemini, fake, not 'e5'"),
    ],
)
def test_a_model_no_package_ships_is_refused_at_start(environment: dict[str, str], message: str) -> None:
    # URLs never dialled: the settings would otherwise start an embedded PostgreSQL and Redis.
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memory_project.settings",
        "DATABASE_URL": "postgres://settings@localhost/none",
        "REDIS_URL": "redis://localhost:1/0",
        **environment,
    }
    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode != 0
    assert "ImproperlyConfigured: " + message in started.stderr


def test_a_model_name_is_taken_whatever_its_case() -> None:
    from memory_project.env import env_named

    assert env_named("EMBEDDING_MODEL", "Multilingual-E5-Small-Q4", ("all-MiniLM-L6-v2", E5), when="x") == E5
