"""The abuse limits of the agent API (memoryapp.agents.limits keeps their counts in Redis):

- `KeyRateThrottle`, DRF's throttle of every agent request: a token bucket per key; past it, 429
  `rate_limited` with Retry-After (the seconds until a token is back).
- `heavy_request`, around the heavy work of a view (a context build, a search): at most
  API_HEAVY_CONCURRENCY (or the agent's `heavy_concurrency`) at once per key; past it, 429
  `too_many_concurrent_requests` with Retry-After.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.http import HttpRequest
from rest_framework import throttling
from rest_framework.request import Request

from memoryapp.agents.limits import heavy_cap_of, heavy_slot_give, heavy_slot_take, rate_take
from memoryapp.api.auth import RATE_ATTRIBUTE, AgentUser
from memoryapp.errors import TooManyRequests
from memoryapp.models import Agent, AgentKey


class KeyRateThrottle(throttling.BaseThrottle):
    """A token bucket per agent key (not per agent: one leaked key cannot starve the others)."""

    def __init__(self) -> None:
        self.retry_after: float | None = None

    def allow_request(self, request: Request, view: Any) -> bool:
        user, key = request.user, request.auth
        if not isinstance(user, AgentUser) or not isinstance(key, AgentKey):
            return True
        self.retry_after = key_rate_wait(request, key=key, agent=user.agent)
        return self.retry_after is None

    def wait(self) -> float | None:
        return self.retry_after


def key_rate_wait(request: Request | HttpRequest, *, key: AgentKey, agent: Agent) -> float | None:
    """Take one request from the key's bucket (`rate_take`): None when it may go on, else the seconds
    to wait. A request whose authentication took the token already (in its one round trip to Redis,
    memoryapp.api.auth) is answered from that, so no request takes two."""
    taken = getattr(getattr(request, "_request", request), RATE_ATTRIBUTE, None)
    if taken is not None:
        return float(taken) or None
    return rate_take(key=key, agent=agent)


@contextmanager
def heavy_request(request: Request) -> Iterator[None]:
    """Hold one of the key's heavy-request slots while the block runs; refuse when it holds all."""
    user, key = request.user, request.auth
    if not isinstance(user, AgentUser) or not isinstance(key, AgentKey):
        yield
        return
    with heavy_slot_held(key=key, agent=user.agent):
        yield


@contextmanager
def heavy_slot_held(*, key: AgentKey, agent: Agent) -> Iterator[None]:
    """`heavy_request` for a caller known by its key and agent (the MCP endpoint's)."""
    token = heavy_slot_take(key=key, agent=agent)
    if token is False:
        cap = heavy_cap_of(agent)
        raise TooManyRequests(
            "too_many_concurrent_requests",
            f"This key has {cap} context build(s) or search(es) running already; retry when one has finished.",
            retry_after=1,
        )
    try:
        yield
    finally:
        if isinstance(token, str):
            heavy_slot_give(key=key, token=token)
