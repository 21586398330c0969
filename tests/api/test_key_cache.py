"""A web process keeps key lookups for a few seconds (memoryapp.agents.keycache); every change of an
agent or a key is seen on the very next request, in every process: a revoked key, a deactivated
agent, new purposes, a new screening policy."""

from __future__ import annotations

import http.client
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp.agents.keycache import cached_key, key_cache_clear, key_cache_put, request_copies
from memoryapp.agents.limits import KEYS_VERSION_NAME, limits_breaker_reset, limits_redis
from memoryapp.agents.selectors import hash_key
from memoryapp.agents.services import agent_key_create, agent_key_revoke
from memoryapp.items.purposes import agent_purposes_set
from memoryapp.models import Agent, AgentKey
from memoryapp.screening.policy import screening_policy_set
from tests.kit.api import Caller, answered
from tests.kit.servers import free_port, gunicorn_serving


def get(where: str, key: str, path: str) -> tuple[int, Any]:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def key_lookups(queries: list[dict[str, Any]]) -> int:
    return sum('FROM "memoryapp_agentkey"' in q["sql"] for q in queries)


def test_a_second_request_does_not_look_up_the_key_again(alice: Caller) -> None:
    limits_breaker_reset()
    key_cache_clear()
    with CaptureQueriesContext(connection) as first:
        answered(alice.client.get("/api/v1/threads"), 200)
    with CaptureQueriesContext(connection) as second:
        answered(alice.client.get("/api/v1/threads"), 200)
    assert key_lookups(first.captured_queries) == 1
    assert key_lookups(second.captured_queries) == 0


def test_a_revoked_key_is_refused_on_the_next_request_in_this_process(alice: Caller) -> None:
    limits_breaker_reset()
    answered(alice.client.get("/api/v1/threads"), 200)
    answered(alice.client.get("/api/v1/threads"), 200)
    agent_key_revoke(key=AgentKey.objects.get(key_hash=hash_key(alice.key)), actor="test")
    assert alice.client.get("/api/v1/threads").status_code == 401


def test_a_request_cannot_change_the_cached_agent_of_the_next(alice: Caller) -> None:
    limits_breaker_reset()
    answered(alice.client.patch("/api/v1/settings/purposes", {"purposes": ["support"]}, format="json"), 200)
    assert answered(alice.client.get("/api/v1/settings/purposes"), 200)["purposes"] == ["support"]
    answered(alice.client.patch("/api/v1/settings/purposes", {"purposes": []}, format="json"), 200)
    assert answered(alice.client.get("/api/v1/settings/purposes"), 200)["purposes"] == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_change_of_an_agent_or_key_is_seen_at_once_by_two_gunicorn_processes(
    alice: Caller, bob: Caller, tmp_path: Path
) -> None:
    limits_breaker_reset()
    _, carol_key = agent_key_create(agent=alice.agent, name="second")
    with ExitStack() as stack:
        servers = [
            stack.enter_context(gunicorn_serving(var_dir=tmp_path / name, env={"API_KEY_CACHE_SECONDS": "600"}))
            for name in ("one", "two")
            if (tmp_path / name).mkdir() is None
        ]
        for where in servers:
            for key in (alice.key, carol_key, bob.key):
                for _ in range(2):  # the second is served from the process's cached lookup
                    assert get(where, key, "/api/v1/threads")[0] == 200

        # Purposes, then the screening policy: the next request of each process sees them.
        agent_purposes_set(agent=alice.agent, values=["support", "billing"], actor="test")
        screening_policy_set(agent=alice.agent, values={"email": "redact"}, actor="test")
        for where in servers:
            assert get(where, alice.key, "/api/v1/settings/purposes") == (200, {"purposes": ["support", "billing"]})
            status, policy = get(where, alice.key, "/api/v1/settings/screening")
            assert status == 200 and policy["email"] == "redact", policy

        # A revoked key: refused by both at once; the agent's other key goes on working.
        agent_key_revoke(key=AgentKey.objects.get(key_hash=hash_key(alice.key)), actor="test")
        for where in servers:
            assert get(where, alice.key, "/api/v1/threads")[0] == 401
            assert get(where, carol_key, "/api/v1/threads")[0] == 200

        # A deactivated agent (a bulk update, as an admin action makes it): refused by both.
        Agent.objects.filter(pk=bob.agent.pk).update(active=False)
        for where in servers:
            assert get(where, bob.key, "/api/v1/threads")[0] == 401


# --- Redis away while an agent or a key changes ----------------------------------------------------


def test_a_key_revoked_while_redis_is_away_is_not_served_from_a_cache_once_it_is_back(
    alice: Caller, settings: Any
) -> None:
    """A key revoked while Redis is away bumps no version then; another process that kept the key's
    lookup (at the version still in Redis) must not serve it once Redis is back."""
    limits_breaker_reset()
    key_cache_clear()
    answered(alice.client.get("/api/v1/threads"), 200)
    kept = cached_key(hash_key(alice.key))
    assert kept is not None
    redis_url = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    agent_key_revoke(key=AgentKey.objects.get(key_hash=hash_key(alice.key)), actor="test")
    settings.REDIS_URL = redis_url
    limits_breaker_reset()
    # The lookup another web process made before the revocation, at the version Redis still holds.
    key_cache_put(key_hash=hash_key(alice.key), agent=kept.agent, key=kept.key, version=kept.version)
    try:
        assert alice.client.get("/api/v1/threads").status_code == 401
    finally:
        key_cache_clear()


def test_a_process_that_sees_redis_away_drops_the_lookups_it_kept(alice: Caller, bob: Caller, settings: Any) -> None:
    """While Redis is away a change elsewhere bumps no version, so what was kept before is not
    trusted again after: the first request that finds Redis away, whoever's, drops it all."""
    limits_breaker_reset()
    key_cache_clear()
    answered(alice.client.get("/api/v1/threads"), 200)
    assert cached_key(hash_key(alice.key)) is not None
    redis_url = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    try:
        answered(bob.client.get("/api/v1/threads"), 200)  # looked up in the database
        assert cached_key(hash_key(alice.key)) is None
    finally:
        settings.REDIS_URL = redis_url
        limits_breaker_reset()


def test_a_redis_that_lost_its_data_does_not_bring_back_an_old_version(alice: Caller) -> None:
    """Redis restarted without its data: the keys' version starts again. A lookup another process
    kept before a revocation must not match the version counted again from the start."""
    limits_breaker_reset()
    key_cache_clear()
    limits_redis().delete(KEYS_VERSION_NAME)  # a Redis started afresh
    answered(alice.client.get("/api/v1/threads"), 200)
    kept = cached_key(hash_key(alice.key))
    assert kept is not None
    agent_key_revoke(key=AgentKey.objects.get(key_hash=hash_key(alice.key)), actor="test")
    limits_redis().delete(KEYS_VERSION_NAME)  # ... and restarted again, losing the bumps
    key_cache_put(key_hash=hash_key(alice.key), agent=kept.agent, key=kept.key, version=kept.version)
    try:
        assert alice.client.get("/api/v1/threads").status_code == 401
    finally:
        key_cache_clear()


def test_a_request_gets_copies_of_the_kept_agent_and_key(alice: Caller) -> None:
    agent = Agent.objects.get(pk=alice.agent.pk)
    agent.screening, agent.purposes = {"secret": {"action": "block"}}, ["support"]
    agent.save()
    key = AgentKey.objects.select_related("agent").get(key_hash=hash_key(alice.key))
    key_cache_put(key_hash="h", agent=key.agent, key=key, version="v")
    kept = cached_key("h")
    assert kept is not None
    copy_agent, copy_key = request_copies(kept)
    assert copy_key.agent is copy_agent and copy_agent is not kept.agent
    copy_agent.screening["secret"]["action"] = "off"
    copy_agent.purposes.append("billing")
    copy_agent.name = "changed"
    copy_agent.set_by_a_view = True  # type: ignore[attr-defined]
    copy_key.name = "changed"
    again_agent, again_key = request_copies(kept)
    assert again_agent.screening == {"secret": {"action": "block"}} and again_agent.purposes == ["support"]
    assert again_agent.name == agent.name and not hasattr(again_agent, "set_by_a_view")
    assert again_key.name == key.name and again_key.agent is again_agent
    assert not again_agent._state.adding and again_agent.pk == agent.pk
