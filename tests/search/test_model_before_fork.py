"""The local embedding model is loaded once per process tree, before the fork (issue 26): the
gunicorn master and the Celery worker's parent load it, their children share its pages instead of
each loading a copy (~430 MB each), and a web worker is ready from its first request.

Real processes: gunicorn as `make run` starts it, a real `celery worker` with a prefork pool, the
real model. Memory is read from /proc/PID/smaps_rollup; nothing here measures a duration."""

from __future__ import annotations

import http.client
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.kit.faults import Worker, private_redis
from tests.kit.servers import gunicorn_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


# The default model runs on onnxruntime (issue 26), the torch one on torch: each maps its library.
MODELS = {"all-MiniLM-L6-v2-q8": "onnxruntime_pybind11_state", "all-MiniLM-L6-v2": "libtorch_cpu"}


def maps_model(pid: int, model: str) -> bool:
    return MODELS[model] in Path(f"/proc/{pid}/maps").read_text()


def maps_torch(pid: int) -> bool:
    return "libtorch_cpu" in Path(f"/proc/{pid}/maps").read_text()


def maps_screening(pid: int) -> bool:
    """Whether screening's detectors were built here: Presidio's import brings spaCy's compiled modules."""
    return "/spacy/" in Path(f"/proc/{pid}/maps").read_text()


def memory_kb(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        values[name] = int(rest.split()[0])
    return values


def private_kb(pid: int) -> int:
    values = memory_kb(pid)
    return values["Private_Clean"] + values["Private_Dirty"]


def readyz(where: str) -> tuple[int, Any]:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("GET", "/readyz")
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.parametrize("model", MODELS)
def test_gunicorn_workers_share_the_model_the_master_loaded_and_are_ready_at_their_first_request(
    tmp_path: Path, model: str
) -> None:
    # A fresh VAR_DIR: the q8 graph is made by the master before it forks; each worker encodes once
    # (post_worker_init) before its first request, so a ready worker is one that embedded.
    env = {"EMBEDDER": "local", "EMBEDDING_MODEL": model}
    with gunicorn_serving(var_dir=tmp_path, workers=2, env=env) as where:
        # Nothing listens before the model is loaded: the first /readyz answered is ready, whichever
        # worker answers it (each warmed the model before it took a request).
        for _ in range(4):
            status, body = readyz(where)
            assert status == 200, body
            assert body["checks"]["embedding_model"] is True
        (master,) = [pid for pid in children_of(os.getpid()) if "gunicorn" in Path(f"/proc/{pid}/cmdline").read_text()]
        workers = children_of(master)
        assert len(workers) == 2
        assert maps_model(master, model)
        # Screening's warm-up ran in the master; torch is loaded only where the model runs on it
        # (Presidio would import it otherwise: embedders.torch_kept_out).
        assert maps_screening(master)
        assert all(maps_torch(pid) == (model == "all-MiniLM-L6-v2") for pid in (master, *workers))
        master_rss = memory_kb(master)["Rss"]
        for worker in workers:
            # A worker that loaded its own copy would hold most of the master's size privately.
            assert maps_model(worker, model)
            assert private_kb(worker) < master_rss // 2, (private_kb(worker), master_rss)


@pytest.mark.parametrize("model", MODELS)
def test_a_celery_worker_of_the_embedding_queue_loads_the_model_before_its_pool_forks(model: str) -> None:
    with private_redis() as redis_server:
        env = {"EMBEDDER": "local", "EMBEDDING_MODEL": model}
        worker = Worker(redis_url=redis_server.url, queues="embedding", env=env, concurrency=2)
        try:
            pool = worker.pool_processes()
            assert len(pool) == 2
            assert maps_model(worker.pid, model)
            parent_rss = memory_kb(worker.pid)["Rss"]
            for child in pool:
                assert maps_model(child, model)
                assert private_kb(child) < parent_rss // 2, (private_kb(child), parent_rss)
        finally:
            worker.stop()


def test_a_celery_worker_of_other_queues_only_loads_no_model() -> None:
    with private_redis() as redis_server:
        worker = Worker(redis_url=redis_server.url, queues="governance", env={"EMBEDDER": "local"})
        try:
            for model in MODELS:
                assert not maps_model(worker.pid, model)
                assert not any(maps_model(child, model) for child in worker.pool_processes())
        finally:
            worker.stop()


@pytest.mark.parametrize("model", MODELS)
def test_a_celery_worker_that_screens_loads_torch_only_for_a_model_on_torch(model: str) -> None:
    # The extraction queue's jobs write screened text: its parent builds screening's detectors
    # before the pool forks, and Presidio's import would bring torch in with it.
    with private_redis() as redis_server:
        env = {"EMBEDDER": "local", "EMBEDDING_MODEL": model}
        worker = Worker(redis_url=redis_server.url, queues="embedding,extraction", env=env, concurrency=1)
        try:
            (child,) = worker.pool_processes()
            assert maps_screening(worker.pid)
            assert maps_torch(worker.pid) == (model == "all-MiniLM-L6-v2")
            assert maps_torch(child) == (model == "all-MiniLM-L6-v2")
        finally:
            worker.stop()
