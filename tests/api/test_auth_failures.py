"""Failed authentications are limited per client address and per key prefix (Redis, as the other
abuse limits): past API_AUTH_FAILURES_PER_MINUTE, 429 `too_many_failed_authentications` with
Retry-After, before the key is even looked up (issue 23: 500 random keys in 5.8 s and 300 wrong
secrets on one real prefix in 2.7 s were all answered). Off in the other tests (tests/pgenv.py)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from governance.models import AuditRecord
from memoryapp.agents.limits import limits_breaker_reset, limits_redis
from memoryapp.agents.services import agent_key_create
from memoryapp.models import Thread
from tests.kit.api import Caller, error_of

LIMIT = 5


@pytest.fixture(autouse=True)
def failures_limited(settings: Any) -> Iterator[None]:
    settings.API_AUTH_FAILURES_PER_MINUTE = LIMIT
    limits_breaker_reset()
    yield
    limits_breaker_reset()
    client = limits_redis()
    for name in client.scan_iter(match="limits:authfail:*"):
        client.delete(name)


def address() -> str:
    """A client address of this test alone (the counters outlive a test by a minute)."""
    return "198.51.100." + str(secrets.randbelow(250) + 1) + "-" + secrets.token_hex(4)


def ask(key: str, *, remote: str, path: str = "/api/v1/threads") -> Any:
    client = APIClient(REMOTE_ADDR=remote)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get(path)


def throttled(response: Any) -> None:
    error = error_of(response, 429)
    assert error["code"] == "too_many_failed_authentications", error
    assert 1 <= int(response["Retry-After"]) <= 60


def test_failed_keys_from_one_address_are_refused_past_the_limit_even_the_right_one(alice: Caller) -> None:
    here, elsewhere = address(), address()
    for _ in range(LIMIT - 1):
        assert error_of(ask(f"mk_{secrets.token_hex(4)}_{secrets.token_urlsafe(8)}", remote=here), 401)
    malformed = APIClient(REMOTE_ADDR=here).get("/api/v1/threads", HTTP_AUTHORIZATION="Basic YWRtaW46YWRtaW4=")
    assert error_of(malformed, 401)["code"] == "invalid_key"  # a malformed header counts as well
    throttled(ask("not-even-a-key", remote=here))
    # Refused before the lookup: guessing right from here is refused too, the MCP endpoint included.
    throttled(ask(alice.key, remote=here))
    mcp = APIClient(REMOTE_ADDR=here).post(
        "/mcp/",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {alice.key}",
        HTTP_ACCEPT="application/json, text/event-stream",
    )
    throttled(mcp)
    # Another address is served.
    assert ask(alice.key, remote=elsewhere).status_code == 200


def test_wrong_secrets_on_one_real_key_prefix_are_refused_from_any_address(alice: Caller) -> None:
    prefix = alice.key.split("_")[0] + "_" + alice.key.split("_")[1]
    for _ in range(LIMIT):
        assert error_of(ask(f"{prefix}_{secrets.token_urlsafe(16)}", remote=address()), 401)
    throttled(ask(f"{prefix}_{secrets.token_urlsafe(16)}", remote=address()))
    # The prefix is locked for the window, the right secret too (it is tried no more than the rest)...
    throttled(ask(alice.key, remote=address()))
    # ...while another key of the same agent is served, and the failures were audited as before.
    _, other = agent_key_create(agent=alice.agent)
    assert ask(other, remote=address()).status_code == 200
    record = AuditRecord.objects.filter(action="agent_key.use_failed", outcome="wrong_secret").first()
    assert record is not None and record.subject == prefix


def test_a_write_without_a_valid_key_is_refused_before_its_body_and_writes_nothing(alice: Caller) -> None:
    here = address()
    client = APIClient(REMOTE_ADDR=here)
    refused = client.post("/api/v1/threads", {"id": "t-1"}, format="json")
    assert error_of(refused, 401)["code"] == "not_authenticated"
    client.credentials(HTTP_AUTHORIZATION="Bearer mk_00000000_wrong")
    assert error_of(client.post("/api/v1/threads", {"id": "t-1"}, format="json"), 401)["code"] == "invalid_key"
    assert not Thread.objects.exists()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {alice.key}")
    assert client.post("/api/v1/threads", {"id": "t-1"}, format="json").status_code == 201


def test_with_the_limit_off_failures_are_never_refused(alice: Caller, settings: Any) -> None:
    settings.API_AUTH_FAILURES_PER_MINUTE = 0
    here = address()
    for _ in range(LIMIT * 2):
        assert error_of(ask("mk_00000000_wrong", remote=here), 401)
    assert ask(alice.key, remote=here).status_code == 200
