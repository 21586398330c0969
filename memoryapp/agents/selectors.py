"""Reads of agents: the agent a raw key belongs to."""

from __future__ import annotations

import hashlib

from django.utils import timezone

from memoryapp.models import Agent, AgentKey


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def agent_for_key(raw: str) -> tuple[Agent, AgentKey] | None:
    """The active agent and key a raw key belongs to, or None. Touches last_used_at at most once a minute."""
    try:
        key = AgentKey.objects.select_related("agent").get(key_hash=hash_key(raw))
    except AgentKey.DoesNotExist:
        return None
    if key.revoked_at is not None or not key.agent.active:
        return None
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        AgentKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key.agent, key
