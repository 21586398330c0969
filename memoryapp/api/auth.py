"""Authentication of agents by `Authorization: Bearer <key>`."""

from __future__ import annotations

import copy
import math
from typing import Any

from django.http import HttpRequest
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from memoryapp.agents.keycache import cached_key, key_cache_clear, key_cache_put, request_copies
from memoryapp.agents.limits import auth_failure_count, request_gate
from memoryapp.agents.selectors import agent_for_key, hash_key, key_used
from memoryapp.agents.services import agent_key_failure_record, key_prefix_of
from memoryapp.errors import TooManyRequests
from memoryapp.models import Agent

# Where a request's key, once checked (before its body is read: memoryapp.api.middleware), is kept
# for the view's own authentication, so the key is looked up once.
FOUND_ATTRIBUTE = "_agent_key_found"
# Where the rate limit's answer is kept when the request's one round trip to Redis took the token
# already (memoryapp.api.limits.KeyRateThrottle reads it instead of asking again).
RATE_ATTRIBUTE = "_agent_key_rate"


class AgentKeyAuthentication(authentication.BaseAuthentication):
    """The agent of `Authorization: Bearer <key>`.

    1. A key checked already for this request (before its body was read) is taken as it was found.
    2. One Redis round trip (`request_gate`): the client's address and the key's prefix must not
       have failed API_AUTH_FAILURES_PER_MINUTE times in the window (memoryapp.agents.limits): else
       429 `too_many_failed_authentications` with Retry-After, before the key is looked up, so
       guessing runs at that rate at most. The same trip reads the keys' version and, for a key
       whose lookup this process keeps at that version, takes its rate limit's token.
    3. The key's lookup kept at that version (memoryapp.agents.keycache) is used; else it is looked
       up in the database and kept.
    4. A malformed header, or a key unknown, revoked or of an inactive agent, is a 401, counted
       against the address and the prefix (and audited, a few rows a minute).
    """

    keyword = "Bearer"

    def authenticate(self, request: Request | HttpRequest) -> tuple[Any, Any] | None:
        django_request = getattr(request, "_request", request)
        if (found := getattr(django_request, FOUND_ATTRIBUTE, None)) is not None:
            return found  # type: ignore[no-any-return]
        header = authentication.get_authorization_header(request).decode("latin-1")  # type: ignore[arg-type]
        if not header:
            return None
        parts = header.split()
        address = str(request.META.get("REMOTE_ADDR") or "")
        raw = parts[1] if len(parts) == 2 else ""
        prefix = key_prefix_of(raw)
        key_hash = hash_key(raw)
        cached = cached_key(key_hash)
        if cached is None:
            gate = request_gate(address=address, prefix=prefix)
        else:
            gate = request_gate(
                address=address, prefix=prefix, key=cached.key, agent=cached.agent, version=cached.version
            )
        if gate.version is None:
            # Redis away: a change made meanwhile bumps no version, so nothing kept before is
            # trusted again (the lookups are made afresh once Redis is back).
            key_cache_clear()
            cached = None
        wait = gate.failures_wait
        if wait is not None:
            seconds = max(1, math.ceil(wait))
            raise TooManyRequests(
                "too_many_failed_authentications",
                f"Too many failed authentications from this address or with this key; retry in {seconds} s.",
                retry_after=seconds,
            )
        if len(parts) != 2 or parts[0].lower() != "bearer":
            auth_failure_count(address=address, prefix=prefix)
            raise exceptions.AuthenticationFailed("The Authorization header must be 'Bearer <key>'.")
        if cached is not None and gate.version is not None and cached.version == gate.version:
            key_used(cached.key)
            agent, key = request_copies(cached)
            if gate.rate is not None:
                setattr(django_request, RATE_ATTRIBUTE, gate.rate)
        else:
            agent_key = agent_for_key(raw, key_hash=key_hash)
            if agent_key is None:
                agent_key_failure_record(raw=raw)
                auth_failure_count(address=address, prefix=prefix)
                raise exceptions.AuthenticationFailed("The key is unknown or revoked.")
            agent, key = agent_key
            if gate.version is not None:
                key_cache_put(key_hash=key_hash, agent=agent, key=key, version=gate.version)
                agent, key = copy.deepcopy((agent, key))
        found = (AgentUser(agent), key)
        setattr(django_request, FOUND_ATTRIBUTE, found)
        return found

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class AgentUser:
    """What `request.user` is for an agent request: the agent, and nothing of Django's users."""

    is_authenticated = True
    is_anonymous = False
    is_staff = False

    def __init__(self, agent: Agent):
        self.agent = agent
        self.pk = agent.pk

    def __str__(self) -> str:
        return f"agent:{self.agent.slug}"


class IsAgent(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, AgentUser)


def request_agent(request: Request) -> Agent:
    """The agent of an authenticated request: the only way views learn whose data they touch."""
    user = request.user
    if not isinstance(user, AgentUser):
        raise exceptions.NotAuthenticated()
    return user.agent


class AgentKeyScheme(OpenApiAuthenticationExtension):
    """The key as the OpenAPI schema states it, so clients and fuzzers know to send it."""

    target_class = AgentKeyAuthentication
    name = "agentKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An agent key: Authorization: Bearer mk_..."}
