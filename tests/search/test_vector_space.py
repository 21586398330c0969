"""The vector space record (issue 26): which embedder and model made the stored vectors, so that
a change of EMBEDDING_MODEL at the same dimension is said, not mixed silently (memoryapp.search.space,
migration 0057, docs/operations.md "Changing the embedding model")."""

from __future__ import annotations

import importlib
from io import StringIO
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings

from memory_project import health
from memoryapp.models import VectorSpace
from memoryapp.search import retrieval
from memoryapp.search.indexing import reembed_all
from memoryapp.search.space import recorded_space, space_record, vector_space_status
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded

DOG_TURNS = [
    ("user", "I adopted a golden retriever puppy named Biscuit last week."),
    ("assistant", "Congratulations on Biscuit!"),
]
Q8 = "all-MiniLM-L6-v2-q8"
TORCH = "all-MiniLM-L6-v2"
E5 = "multilingual-e5-small-q4"


@pytest.fixture(autouse=True)
def fresh_space_check() -> Any:
    retrieval._space_checked = None
    yield
    retrieval._space_checked = None


def _recorded(model: str, embedder: str = "local") -> None:
    space_record(embedder=embedder, model=model)


def _search(caller: Any, text: str) -> Any:
    return caller.client.post("/api/v1/search", {"text": text}, format="json").json()


def test_the_first_vector_written_records_the_configured_model(alice: Any, settings: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    VectorSpace.objects.all().delete()
    assert recorded_space() is None

    embedded(alice.agent)

    assert recorded_space() == (f"{settings.EMBEDDER}:{settings.EMBEDDING_MODEL}", "")
    row = VectorSpace.objects.get()
    assert row.dimensions == settings.EMBEDDING_DIMENSIONS


def test_the_migration_records_existing_vectors_as_the_old_default_and_nothing_without_vectors(
    alice: Any,
) -> None:
    migration = importlib.import_module("memoryapp.migrations.0057_vector_space")
    VectorSpace.objects.all().delete()
    with connection.schema_editor() as editor:
        migration.record_existing(django_apps, editor)
    assert recorded_space() is None  # no vector yet: the first one written records its model

    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    VectorSpace.objects.all().delete()
    with connection.schema_editor() as editor:
        migration.record_existing(django_apps, editor)
    assert recorded_space() == ("local:all-MiniLM-L6-v2", "")


def test_a_close_variant_keeps_the_vector_channel_and_says_reembed(alice: Any, admin_client: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    _recorded(TORCH)

    with override_settings(EMBEDDER="local", EMBEDDING_MODEL=Q8):
        status = vector_space_status()
        assert status.ok and status.ready and status.stale
        assert "made by local:all-MiniLM-L6-v2" in status.message and "manage.py reembed" in status.message
        # /readyz's checks (called here: asking /readyz would load the configured model)
        assert health._embeddings()[0] is True
        assert health._vector_space() == {
            "recorded": "local:all-MiniLM-L6-v2",
            "configured": f"local:{Q8}",
            "stale": True,
            "vector_channel": True,
            "moving_to": "",
        }
        page = admin_client.get("/admin/").content.decode()
        assert 'id="ov-vector-space"' in page and "made by local:all-MiniLM-L6-v2" in page
        # The gate a search and a context build ask before their vector channel: open.
        assert retrieval.vector_space_ok()[0] is True


def test_another_model_turns_the_vector_channel_off_but_stays_ready(alice: Any, admin_client: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    _recorded(E5)  # as if e5 had made them: the configured MiniLM's queries cannot search them

    status = vector_space_status()
    assert not status.ok and status.ready and status.stale
    body = _search(alice, "golden retriever")
    assert body["results"] and body["results"][0]["channels"][0] == "keyword"
    assert "vector" not in {c for r in body["results"] for c in r["channels"]}
    [error] = [e for e in body["errors"] if e["source"] == "vector"]
    assert f"made by local:{E5}, another model" in error["message"]
    ready = admin_client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["details"]["vector_space"]["vector_channel"] is False
    assert "ov-bad" in admin_client.get("/admin/").content.decode().split('id="ov-vector-space"')[0][-40:]


def test_reembed_records_the_new_model_when_it_finishes_and_where_it_goes_while_it_runs(
    alice: Any, settings: Any
) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    _recorded(E5)
    seen: list[Any] = []

    reembed_all(agent_id=None, progress=lambda done: seen.append(recorded_space()))

    configured = f"{settings.EMBEDDER}:{settings.EMBEDDING_MODEL}"
    assert seen and all(s == (f"local:{E5}", configured) for s in seen)
    assert recorded_space() == (configured, "")
    assert not vector_space_status().stale


def test_reembed_of_one_agent_leaves_the_record(alice: Any, bob: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    _recorded(E5)

    call_command("reembed", "--agent", alice.agent.slug, stdout=StringIO())

    assert recorded_space() == (f"local:{E5}", "")


def test_the_vector_space_command_records_and_refuses_bad_input(db: None) -> None:
    out = StringIO()
    call_command("vector_space", "--record", "openai:text-embedding-3-small", stdout=out)
    assert recorded_space() == ("openai:text-embedding-3-small", "")
    assert "recorded: openai:text-embedding-3-small" in out.getvalue()
    for bad in ("nocolon", "e5:x", "local:bge-small"):
        with pytest.raises(CommandError):
            call_command("vector_space", "--record", bad, stdout=StringIO())
    assert recorded_space() == ("openai:text-embedding-3-small", "")


def test_reembed_dimensions_records_the_configured_model(alice: Any, settings: Any) -> None:
    ThreadFactory(agent=alice.agent, turns=DOG_TURNS)
    embedded(alice.agent)
    _recorded(E5)
    with override_settings(EMBEDDING_DIMENSIONS=16):
        call_command("reembed", "--dimensions", stdout=StringIO())
        assert recorded_space() == (f"{settings.EMBEDDER}:{settings.EMBEDDING_MODEL}", "")
        assert VectorSpace.objects.get().dimensions == 16


def test_another_model_turns_off_the_vector_channel_of_knowledge_and_fact_recall_too(alice: Any) -> None:
    # Knowledge search (and the context build's passages) compared the configured model's query
    # vector with vectors another model made: the channel the record says is off still answered.
    added = alice.client.post(
        "/api/v1/knowledge", {"name": "dogs.md", "content": "Biscuit is a golden retriever puppy."}, format="json"
    )
    assert added.status_code == 201
    _recorded(E5)
    assert not vector_space_status().ok

    body = alice.client.post(
        "/api/v1/knowledge/search", {"text": "Which puppy breed is Biscuit?"}, format="json"
    ).json()
    assert body["results"], body
    assert all("vector" not in hit["channels"] for hit in body["results"]), body


def test_another_model_turns_off_the_facts_meaning_channel(alice: Any) -> None:
    from memoryapp.models import MemoryItem
    from memoryapp.search.embedders import EmbedderError
    from memoryapp.search.fact_meaning import facts_nearest

    _recorded(E5)
    with pytest.raises(EmbedderError, match="another model"):
        facts_nearest(MemoryItem.objects.filter(agent=alice.agent), "golden retriever", 3)
