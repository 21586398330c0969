"""Writes of agents and their keys: a key is generated once, shown once, kept as a SHA-256 hash
with a readable prefix; how far an agent's writes are trusted changes only through here, audited."""

from __future__ import annotations

import logging
import re
import secrets

from django.db import transaction
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.crypto.envelope import data_keys_destroy_agent
from memoryapp.agents.limits import agent_key_failure_count
from memoryapp.agents.selectors import hash_key
from memoryapp.errors import DomainError
from memoryapp.models import Agent, AgentKey, LegalHold
from memoryapp.models.choices import TRUST_RANK, Trust

logger = logging.getLogger(__name__)

KEY_PREFIX = "mk_"
# Who may change how far an agent's writes are trusted (a key's max trust, the agent's shadow
# mode): that decides which items skip the review queue, so it is a security decision. No role
# group holds it (governance/staff/roles.py); a superuser has it and may grant it to a named user.
TRUST_PERMISSION = "memoryapp.set_agent_trust"


@transaction.atomic
def agent_key_create(*, agent: Agent, name: str = "", actor: str = "system") -> tuple[AgentKey, str]:
    """Create a key for `agent`; returns the row and the raw key, which is never stored."""

    prefix = KEY_PREFIX + secrets.token_hex(4)
    raw = f"{prefix}_{secrets.token_urlsafe(32)}"
    key = AgentKey.objects.create(agent=agent, name=name, prefix=prefix, key_hash=hash_key(raw))
    audit_append(action="agent_key.created", actor=actor, agent_id=agent.pk, subject=prefix, outcome="created")
    return key, raw


@transaction.atomic
def agent_key_revoke(*, key: AgentKey, actor: str) -> AgentKey:

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
def agent_key_trust_set(*, key: AgentKey, max_trust: str, actor: str) -> AgentKey:
    """Set the most trusted source a key may write items as; audited with the old and new level.

    The caller checks that the person holds TRUST_PERMISSION (the admin does): raising a key to
    `user` or `system` lets its agent's items skip the review queue.
    """

    if max_trust not in Trust.values:
        raise DomainError("invalid_value", f"max_trust must be one of {list(Trust.values)}.", field="max_trust")
    locked = AgentKey.objects.select_for_update().get(pk=key.pk)
    old = locked.max_trust
    if old != max_trust:
        locked.max_trust = max_trust
        locked.save(update_fields=["max_trust"])
        audit_append(
            action="agent_key.trust_set",
            actor=actor,
            agent_id=locked.agent_id,
            subject=locked.prefix,
            outcome="raised" if TRUST_RANK[Trust(max_trust)] < TRUST_RANK[Trust(old)] else "lowered",
            details={"key_id": locked.pk, "from": old, "to": max_trust},
        )
    key.max_trust = locked.max_trust
    return locked


@transaction.atomic
def agent_shadow_mode_set(*, agent: Agent, shadow_mode: bool, actor: str) -> Agent:
    """Turn an agent's shadow mode on or off; audited. Off, what extraction finds from trusted turns
    becomes active without review, so the caller checks TRUST_PERMISSION as for a key's trust."""

    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    if locked.shadow_mode != shadow_mode:
        locked.shadow_mode = shadow_mode
        locked.save(update_fields=["shadow_mode"])
        audit_append(
            action="agent.shadow_mode_set",
            actor=actor,
            agent_id=locked.pk,
            subject=locked.slug,
            outcome="on" if shadow_mode else "off",
            details={"from": not shadow_mode, "to": shadow_mode},
        )
    agent.shadow_mode = locked.shadow_mode
    return locked


@transaction.atomic
def agent_get_or_create(*, slug: str, name: str = "", actor: str = "system") -> tuple[Agent, bool]:

    agent, created = Agent.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    if created:
        audit_append(action="agent.created", actor=actor, agent_id=agent.pk, subject=slug, outcome="created")
    return agent, created


def key_prefix_of(raw: str) -> str:
    """The visible part of a key as a client sent it (`mk_` and 8 hex digits), or "" when the text
    does not start like a key: what a key's failed uses are counted and limited by."""
    prefix = raw[: len(KEY_PREFIX) + 8]
    return prefix if re.fullmatch(re.escape(KEY_PREFIX) + "[0-9a-f]{8}", prefix) else ""


def _audited_count(count: int) -> bool:
    """1, 10, 100, ...: the counts of a minute's failures that reach the audit."""
    while count >= 10 and count % 10 == 0:
        count //= 10
    return count == 1


def agent_key_failure_record(*, raw: str) -> str:
    """Record a failed use of a key (unknown, revoked, of an inactive agent, or a known prefix with
    the wrong secret); answers why it failed.

    A flood of bad keys must not flood the audit chain: failures are counted per minute in Redis
    (per key prefix when the prefix is a real key's, else all together), and only the 1st, 10th,
    100th, ... of a minute append a record, which carries the count so far. The record holds the
    key's prefix only when a key of that prefix exists (it is not secret); nothing of an unknown
    key, which is whatever text the caller sent.
    """
    found = AgentKey.objects.select_related("agent").filter(key_hash=hash_key(raw)).first()
    if found is not None:
        reason = "revoked" if found.revoked_at is not None else "agent_inactive"
        key: AgentKey | None = found
    else:
        prefix = key_prefix_of(raw)
        key = AgentKey.objects.filter(prefix=prefix).first() if prefix else None
        reason = "wrong_secret" if key is not None else "unknown_key"
    window = timezone.now().strftime("%Y-%m-%dT%H:%M")
    count = agent_key_failure_count(scope=key.prefix if key else "unknown", window=window)
    if count is None:
        logger.warning("failed key use (%s) not counted: Redis is unavailable", reason)
        return reason
    if _audited_count(count):
        audit_append(
            action="agent_key.use_failed",
            actor="anonymous",
            agent_id=key.agent_id if key else None,
            subject=key.prefix if key else "",
            outcome=reason,
            details={"failures_this_minute": count, "minute": window},
        )
    return reason


# What staff set on an agent's page beyond its name: each change audited with the old and new value.
AGENT_LIMIT_FIELDS = (
    "on_busy",
    "busy_timeout_seconds",
    "rate_limit_per_minute",
    "rate_limit_burst",
    "heavy_concurrency",
)


@transaction.atomic
def agent_limits_set(*, agent: Agent, values: dict[str, object], actor: str) -> Agent:
    """Set an agent's busy policy and abuse limits (AGENT_LIMIT_FIELDS); audited, old and new values."""
    unknown = sorted(set(values) - set(AGENT_LIMIT_FIELDS))
    if unknown:
        raise DomainError("unknown_field", f"{unknown[0]}: not a limit of an agent.", field=unknown[0])
    locked = Agent.objects.select_for_update().get(pk=agent.pk)
    changed = {name: value for name, value in values.items() if getattr(locked, name) != value}
    if changed:
        before = {name: getattr(locked, name) for name in changed}
        for name, value in changed.items():
            setattr(locked, name, value)
        locked.full_clean(exclude=[f.name for f in Agent._meta.fields if f.name not in changed])
        locked.save(update_fields=list(changed))
        audit_append(
            action="agent.limits_set",
            actor=actor,
            agent_id=locked.pk,
            subject=locked.slug,
            outcome="changed",
            details={"from": before, "to": changed},
        )
    for name in AGENT_LIMIT_FIELDS:
        setattr(agent, name, getattr(locked, name))
    return locked


def holds_naming_agent(*, agent: Agent) -> list[LegalHold]:
    """The legal holds that name the agent, lifted or not: each keeps it (a hold's record outlives
    the hold, and its agent with it: `LegalHold.agent` is PROTECT)."""
    return list(LegalHold.objects.filter(agent=agent).order_by("pk"))


@transaction.atomic
def agent_delete(*, agent: Agent, actor: str) -> dict[str, int]:
    """Delete an agent with everything it holds (threads, entries, items, files, keys...).

    1. Refused (DomainError on `agent`) while a legal hold names it: deactivate it instead.
    2. The database's cascade deletes its rows; the counts by kind are what it deleted.
    3. With encryption at rest, every data key of the agent is destroyed (crypto-shredding: a
       backup of its rows no longer opens), counted as `data_keys_destroyed`.
    4. One audit record in the same transaction: the agent's id and the counts, nothing else.
    """
    holds = holds_naming_agent(agent=agent)
    if holds:
        names = ", ".join(f"#{hold.pk}" for hold in holds)
        raise DomainError(
            "held",
            f"Agent {agent.slug} cannot be deleted: legal hold {names} names it (deactivate the agent instead).",
            field="agent",
        )
    pk = agent.pk
    _, by_model = Agent.objects.filter(pk=pk).delete()
    counts = {label.lower(): n for label, n in sorted(by_model.items()) if n}  # "memoryapp.entry": 3
    shredded = data_keys_destroy_agent(agent_id=pk)
    if shredded:
        counts["data_keys_destroyed"] = len(shredded)
    audit_append(
        action="agent.deleted",
        actor=actor,
        agent_id=pk,
        subject=f"agent {pk}",
        outcome="deleted",
        details={"agent_id": pk, **counts},
    )
    return counts
