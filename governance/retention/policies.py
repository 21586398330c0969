"""Retention policies (002 RetentionOptions): the default one and one per agent, how long each kind of
memory is kept. Their reads (`policy_for`: the agent's own, else the default) serve the prune and
the review queue (`suggested_deadline`); their writes, from the admin, are audited with their rules
(numbers, never text). The model is `memoryapp.models.RetentionPolicy`."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from governance.audit.chain import audit_append
from memoryapp.models import Agent, MemoryItem, RetentionPolicy
from memoryapp.models.choices import ItemStatus


def policy_for(
    agent: Agent | None, *, policies: dict[int | None, RetentionPolicy] | None = None
) -> RetentionPolicy | None:
    """The narrowest policy: the agent's own, else the default (None: keep everything)."""
    known = policies if policies is not None else retention_policies()
    if agent is not None and agent.pk in known:
        return known[agent.pk]
    return known.get(None)


def retention_policies() -> dict[int | None, RetentionPolicy]:
    """Every policy by its agent's pk (None: the default)."""
    return {p.agent_id: p for p in RetentionPolicy.objects.all()}


def suggested_deadline(
    item: MemoryItem, *, policies: dict[int | None, RetentionPolicy] | None = None
) -> datetime | None:
    """When a suggested item expires unreviewed under its agent's policy (None: never).
    Pass `policies` (`retention_policies()`) when asking for many items: one query for all."""
    known = policies if policies is not None else retention_policies()
    policy = known.get(item.agent_id, known.get(None))
    if policy is None or policy.suggested_review_days is None or item.status != ItemStatus.SUGGESTED:
        return None
    return item.recorded_at + timedelta(days=policy.suggested_review_days)


POLICY_RULES = (
    "thread_ttl_days",
    "keep_checkpoints",
    "drop_branches",
    "suggested_review_days",
    "inactive_item_days",
    "job_run_days",
    "tool_result_days",
    "event_days",
)


@transaction.atomic
def retention_policy_save(*, policy: RetentionPolicy, actor: str) -> RetentionPolicy:
    """Create or change a policy (from the admin's form), audited with its rules (numbers, no text)."""
    created = policy.pk is None
    policy.updated_by = actor
    policy.save()
    audit_append(
        action="retention.policy_saved",
        actor=actor,
        agent_id=policy.agent_id,
        subject=f"policy {policy.pk}",
        outcome="created" if created else "changed",
        details={
            "policy_id": policy.pk,
            "default": policy.agent_id is None,
            **{r: getattr(policy, r) for r in POLICY_RULES},
        },
    )
    return policy


@transaction.atomic
def retention_policy_delete(*, policy: RetentionPolicy, actor: str) -> None:
    """Delete a policy: its agent follows the default from now on (the default gone: keep everything)."""
    pk, agent_id = policy.pk, policy.agent_id
    policy.delete()
    audit_append(
        action="retention.policy_deleted",
        actor=actor,
        agent_id=agent_id,
        subject=f"policy {pk}",
        outcome="deleted",
        details={"policy_id": pk, "default": agent_id is None},
    )
