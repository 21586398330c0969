"""Abuse limits of agent keys: a request rate per key (token bucket in Redis, 429 with
Retry-After, recovering as tokens come back), configurable per agent; a cap on a key's
concurrent context builds and searches, checked with real concurrent requests to gunicorn; the
limits fail open when Redis is away."""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryapp.agents.limits import _script_run, _script_sha, limits_breaker_reset, limits_redis
from memoryapp.agents.services import agent_key_create
from memoryapp.models import Agent, Thread
from tests.kit.api import Caller, answered, error_of
from tests.kit.servers import free_port, gunicorn_serving


@pytest.fixture(autouse=True)
def breaker_closed() -> Iterator[None]:
    limits_breaker_reset()
    yield
    limits_breaker_reset()


def limit(caller: Caller, **fields: Any) -> None:
    Agent.objects.filter(pk=caller.agent.pk).update(**fields)


def test_a_key_past_its_rate_gets_429_with_retry_after_then_recovers(alice: Caller) -> None:
    # 12 a minute: a token comes back every 5 s, far slower than the requests (even on a busy machine).
    limit(alice, rate_limit_per_minute=12, rate_limit_burst=2)
    for _ in range(2):
        answered(alice.client.get("/api/v1/threads"), 200)
    refused = alice.client.post("/api/v1/threads", {"id": "t-late"}, format="json")
    error = error_of(refused, 429)
    assert error["code"] == "rate_limited" and "retry" in error["message"]
    retry_after = int(refused["Retry-After"])
    assert 1 <= retry_after <= 5
    assert not Thread.objects.exists()  # refused before the view: nothing written
    time.sleep(retry_after + 0.2)
    answered(alice.client.post("/api/v1/threads", {"id": "t-late"}, format="json"), 201)
    assert error_of(alice.client.get("/api/v1/threads"), 429)["code"] == "rate_limited"


def test_limits_are_per_agent_with_the_settings_as_default(alice: Caller, bob: Caller, settings: Any) -> None:
    # Slow refills (one token in 10 s): a slow machine's requests cannot earn one back meanwhile.
    settings.API_RATE_PER_MINUTE, settings.API_RATE_BURST = 6, 3
    limit(alice, rate_limit_per_minute=6, rate_limit_burst=20)
    for _ in range(3):
        answered(bob.client.get("/api/v1/threads"), 200)
    assert error_of(bob.client.get("/api/v1/threads"), 429)["code"] == "rate_limited"
    # Alice's own burst of 20 holds where the default's 3 would not.
    for _ in range(10):
        answered(alice.client.get("/api/v1/threads"), 200)
    # An agent set to 0 has no rate limit.
    limit(bob, rate_limit_per_minute=0)
    for _ in range(5):
        answered(bob.client.get("/api/v1/threads"), 200)


def test_each_key_has_a_bucket_of_its_own(alice: Caller) -> None:
    limit(alice, rate_limit_per_minute=6, rate_limit_burst=1)
    answered(alice.client.get("/api/v1/threads"), 200)
    error_of(alice.client.get("/api/v1/threads"), 429)
    _, other = agent_key_create(agent=alice.agent)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {other}")
    answered(client.get("/api/v1/threads"), 200)


def test_the_limits_fail_open_when_redis_is_away(
    alice: Caller, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    limit(alice, rate_limit_per_minute=60, rate_limit_burst=1, heavy_concurrency=1)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    with caplog.at_level(logging.WARNING, logger="memoryapp.agents.limits"):
        for _ in range(3):
            answered(alice.client.get("/api/v1/threads"), 200)
        answered(alice.client.post("/api/v1/search", {"text": "rome"}, format="json"), 200)
    assert any("fails open" in record.getMessage() for record in caplog.records)


# --- the heavy-request cap, with real concurrent requests -------------------------------------------


class SlowEmbeddings:
    """An OpenAI-compatible embeddings endpoint that takes `delay` seconds to answer."""

    def __init__(self, delay: float, dimensions: int = 384):
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                outer.calls += 1
                time.sleep(delay)
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = [{"index": i, "embedding": [1.0] + [0.0] * (dimensions - 1)} for i in range(len(texts))]
                payload = json.dumps({"data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def search(where: str, key: str) -> tuple[int, dict[str, str], Any]:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        body = json.dumps({"text": "where is the meeting", "method": "vector"})
        conn.request(
            "POST",
            "/api/v1/search",
            body=body,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        raw = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw)
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_heavy_requests_past_the_cap_get_429(alice: Caller, bob: Caller, tmp_path: Path) -> None:
    limit(alice, heavy_concurrency=1)
    limit(bob, heavy_concurrency=2)
    embeddings = SlowEmbeddings(delay=1.5)
    env = {"EMBEDDER": "openai", "EMBEDDING_URL": embeddings.url, "EMBEDDING_API_KEY": "test", "EMBEDDING_MODEL": "m"}
    try:
        with gunicorn_serving(var_dir=tmp_path, threads=6, env=env) as where:
            answers: list[tuple[str, tuple[int, dict[str, str], Any]]] = []

            def send(who: Caller) -> None:
                answers.append((who.agent.slug, search(where, who.key)))

            workers = [threading.Thread(target=send, args=(who,)) for who in (alice, alice, bob, bob)]
            for worker in workers:
                worker.start()
                time.sleep(0.2)  # each arrives while the ones before are waiting for their embedding
            for worker in workers:
                worker.join(60)
            by_agent = {slug: sorted(status for s, (status, _, _) in answers if s == slug) for slug in ("alice", "bob")}
            assert by_agent == {"alice": [200, 429], "bob": [200, 200]}
            refused = next(answer for slug, answer in answers if answer[0] == 429)
            assert refused[1]["retry-after"] == "1"
            assert refused[2]["error"]["code"] == "too_many_concurrent_requests"
            # The slot was given back: the next search of alice's is served.
            assert search(where, alice.key)[0] == 200
    finally:
        embeddings.close()


def test_the_mcp_endpoint_counts_against_the_same_rate(alice: Caller) -> None:
    limit(alice, rate_limit_per_minute=6, rate_limit_burst=1)
    answered(alice.client.get("/api/v1/threads"), 200)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    refused = alice.client.post("/mcp/", body, format="json", HTTP_ACCEPT="application/json, text/event-stream")
    assert error_of(refused, 429)["code"] == "rate_limited" and 1 <= int(refused["Retry-After"]) <= 10


def test_mcp_get_context_holds_a_heavy_slot_like_the_api(alice: Caller) -> None:
    from memoryapp.agents.limits import heavy_slot_give, heavy_slot_take
    from memoryapp.models import AgentKey

    limit(alice, heavy_concurrency=1)
    answered(alice.client.post("/api/v1/threads", {"id": "t-1"}, format="json"), 201)
    key = AgentKey.objects.get(agent=alice.agent)
    held = heavy_slot_take(key=key, agent=Agent.objects.get(pk=alice.agent.pk))  # another request's
    assert isinstance(held, str)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_context", "arguments": {"thread_id": "t-1", "max_tokens": 500}},
    }
    accept = "application/json, text/event-stream"
    refused = alice.client.post("/mcp/", call, format="json", HTTP_ACCEPT=accept)
    assert error_of(refused, 429)["code"] == "too_many_concurrent_requests" and refused["Retry-After"] == "1"
    # Other MCP requests are not heavy.
    listed = alice.client.post(
        "/mcp/", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, format="json", HTTP_ACCEPT=accept
    )
    assert listed.status_code == 200
    heavy_slot_give(key=key, token=held)
    assert alice.client.post("/mcp/", call, format="json", HTTP_ACCEPT=accept).status_code == 200


def test_mcp_get_context_holds_a_heavy_slot_however_its_name_is_escaped(alice: Caller) -> None:
    """JSON may write the tool's name with escapes (`get\\u005fcontext`); the SDK reads it as
    get_context, so the slot must be taken for it too (a byte search for the name missed it)."""
    from memoryapp.agents.limits import heavy_slot_give, heavy_slot_take
    from memoryapp.models import AgentKey

    limit(alice, heavy_concurrency=1)
    answered(alice.client.post("/api/v1/threads", {"id": "t-1"}, format="json"), 201)
    key = AgentKey.objects.get(agent=alice.agent)
    held = heavy_slot_take(key=key, agent=Agent.objects.get(pk=alice.agent.pk))  # another request's
    assert isinstance(held, str)
    call = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
        '"params": {"name": "get\\u005fcontext", "arguments": {"thread_id": "t-1", "max_tokens": 500}}}'
    )
    assert json.loads(call)["params"]["name"] == "get_context"
    accept = "application/json, text/event-stream"

    try:
        refused = alice.client.post("/mcp/", call, content_type="application/json", HTTP_ACCEPT=accept)
        assert error_of(refused, 429)["code"] == "too_many_concurrent_requests"
    finally:
        heavy_slot_give(key=key, token=held)  # the slots outlive the test's database
    built = alice.client.post("/mcp/", call, content_type="application/json", HTTP_ACCEPT=accept)
    assert built.status_code == 200 and b"result" in built.content


def test_a_limit_script_redis_does_not_hold_is_sent_whole_once_then_named_by_its_hash() -> None:
    """The limits run their Lua by EVALSHA; a Redis that lost its script cache (a restart, SCRIPT
    FLUSH) is sent the text once and answers by hash from then on."""
    source = f"-- {uuid.uuid4().hex}\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])"
    name = f"memory:test:script:{uuid.uuid4().hex}"
    try:
        assert limits_redis().script_exists(_script_sha(source)) == [False]
        assert _script_run(source, 1, name, 2) == 2
        assert limits_redis().script_exists(_script_sha(source)) == [True]
        assert _script_run(source, 1, name, 3) == 5
    finally:
        limits_redis().delete(name)
