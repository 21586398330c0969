"""Agent keys: generated once, shown once, kept as a SHA-256 hash with a readable prefix."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction
from django.utils import timezone

from memoryapp.models import Agent, AgentKey

KEY_PREFIX = "mk_"


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def agent_key_create(*, agent: Agent, name: str = "", actor: str = "system") -> tuple[AgentKey, str]:
    """Create a key for `agent`; returns the row and the raw key, which is never stored."""
    from governance.audit import audit_append

    prefix = KEY_PREFIX + secrets.token_hex(4)
    raw = f"{prefix}_{secrets.token_urlsafe(32)}"
    key = AgentKey.objects.create(agent=agent, name=name, prefix=prefix, key_hash=hash_key(raw))
    audit_append(action="agent_key.created", actor=actor, agent_id=agent.pk, subject=prefix, outcome="created")
    return key, raw


@transaction.atomic
def agent_key_revoke(*, key: AgentKey, actor: str) -> AgentKey:
    from governance.audit import audit_append

    updated = AgentKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    key.refresh_from_db()
    audit_append(
        action="agent_key.revoked",
        actor=actor,
        agent_id=key.agent_id,
        subject=key.prefix,
        outcome="revoked" if updated else "already-revoked",
    )
    return key


@transaction.atomic
def agent_get_or_create(*, slug: str, name: str = "", actor: str = "system") -> tuple[Agent, bool]:
    from governance.audit import audit_append

    agent, created = Agent.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    if created:
        audit_append(action="agent.created", actor=actor, agent_id=agent.pk, subject=slug, outcome="created")
    return agent, created


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
