"""Reads of agents: the agent a raw key belongs to; what deleting one would take with it."""

from __future__ import annotations

import hashlib
from collections import Counter

from django.db import router
from django.db.models import Model
from django.db.models.deletion import Collector
from django.utils import timezone

from memoryapp.models import Agent, AgentKey


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def agent_for_key(raw: str, *, key_hash: str | None = None) -> tuple[Agent, AgentKey] | None:
    """The active agent and key a raw key belongs to, or None. Touches last_used_at at most once a minute."""
    try:
        key = AgentKey.objects.select_related("agent").get(key_hash=key_hash or hash_key(raw))
    except AgentKey.DoesNotExist:
        return None
    if key.revoked_at is not None or not key.agent.active:
        return None
    key_used(key)
    return key.agent, key


def key_used(key: AgentKey) -> None:
    """Touch the key's last_used_at, at most once a minute (not a change of the key: no version bump)."""
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
        AgentKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


def agent_delete_counts(*, agent: Agent) -> dict[type[Model], int]:
    """What deleting the agent would delete, by model, collected as the delete itself collects it.

    For the delete confirmation: the cascade's rows are counted, never read whole (the collector
    reads ids only, or counts what the database deletes by itself), so no sealed value is opened
    and an agent of a million entries costs ids, not rows. A legal hold naming the agent makes the
    collector raise ProtectedError: the caller asks `holds_naming_agent` first.
    """
    collector = Collector(using=router.db_for_write(Agent), origin=agent)
    collector.collect([agent])
    counts: Counter[type[Model]] = Counter()
    for model, instances in collector.data.items():
        counts[model] += len(instances)
    for rows in collector.fast_deletes:
        counts[rows.model] += rows.count()
    return {model: n for model, n in counts.items() if n}
