"""Authentication of agents by `Authorization: Bearer <key>`."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from memoryapp.agents.selectors import agent_for_key
from memoryapp.agents.services import agent_key_failure_record
from memoryapp.models import Agent


class AgentKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            raise exceptions.AuthenticationFailed("The Authorization header must be 'Bearer <key>'.")
        found = agent_for_key(parts[1])
        if found is None:
            agent_key_failure_record(raw=parts[1])
            raise exceptions.AuthenticationFailed("The key is unknown or revoked.")
        agent, key = found
        return AgentUser(agent), key

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
