"""Legal holds: placing and lifting them, audited (ids only: never the reason a person typed).

What a hold keeps is read by `memoryapp.forgetting.holds` (prune and erasure ask it first).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from governance.audit import audit_append
from memoryapp.errors import DomainError
from memoryapp.models import Agent, LegalHold

REASON_MAX = 2000


@transaction.atomic
def legal_hold_place(
    *,
    reason: str,
    placed_by: str,
    agent: Agent | None = None,
    user_id: str = "",
    thread_external_id: str = "",
    ends_at: datetime | None = None,
) -> LegalHold:
    """Hold a person (in one agent, or all) or one thread of an agent, from now until lifted or `ends_at`."""
    user_id, thread_external_id, reason = user_id.strip(), thread_external_id.strip(), reason.strip()
    if bool(user_id) == bool(thread_external_id):
        raise DomainError(
            "invalid_value", "A hold is on a person (user id) or on a thread, one of them.", field="user_id"
        )
    if thread_external_id and agent is None:
        raise DomainError("required", "A thread is held within its agent: choose the agent.", field="agent")
    if not reason:
        raise DomainError("required", "Say why the hold is placed.", field="reason")
    if len(reason) > REASON_MAX:
        raise DomainError("too_long", f"The reason holds at most {REASON_MAX} characters.", field="reason")
    if ends_at is not None and ends_at <= timezone.now():
        raise DomainError("invalid_value", "The end date must be in the future.", field="ends_at")
    hold = LegalHold.objects.create(
        agent=agent,
        user_id=user_id,
        thread_external_id=thread_external_id,
        reason=reason,
        ends_at=ends_at,
        placed_by=placed_by,
    )
    audit_append(
        action="legal_hold.placed",
        actor=placed_by,
        agent_id=agent.pk if agent else None,
        thread_id=thread_external_id,
        subject=f"hold {hold.pk}",
        outcome="placed",
        details={
            "hold_id": hold.pk,
            "on": "thread" if thread_external_id else "person",
            "user_id": user_id,
            "all_agents": agent is None,
            "ends_at": ends_at.isoformat() if ends_at else None,
        },
    )
    return hold


@transaction.atomic
def legal_hold_lift(*, hold: LegalHold, lifted_by: str) -> bool:
    """Lift a hold now; False when it was lifted already (nothing changes)."""
    now = timezone.now()
    lifted = LegalHold.objects.filter(pk=hold.pk, lifted_at__isnull=True).update(lifted_at=now, lifted_by=lifted_by)
    if not lifted:
        return False
    hold.lifted_at, hold.lifted_by = now, lifted_by
    audit_append(
        action="legal_hold.lifted",
        actor=lifted_by,
        agent_id=hold.agent_id,
        thread_id=hold.thread_external_id,
        subject=f"hold {hold.pk}",
        outcome="lifted",
        details={"hold_id": hold.pk},
    )
    return True
