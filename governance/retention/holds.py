"""Legal holds: placing and lifting them, audited (ids; the reason for lifting as typed, see `legal_hold_lift`).

What a hold keeps is read by `governance.retention.held` (prune and erasure ask it first).

A hold and an erasure of its person are ordered by one rule (memoryapp.subjects.erasing step 6):
the erasure takes its lock, then reads the holds behind her holds gate; a hold takes that gate in
its transaction, then looks for the erasures of her holding their lock (`holds_placing`). So a
hold either commits before an erasure reads the holds, and the erasure stops, or finds one running:
it is placed all the same, the legal record that keeps what is left should that erasure be
interrupted, and the agents where one runs are told (`LegalHold.erasures_running`, the audit
record's `erasures_running`), for the admin to warn that the hold came after that erasure began
and does not stop it. A hold on a person in every agent looks in every agent (an erasure of her
runs in any agent, whatever she has there now: a mention of her is enough); a hold on a thread, in
its agent, for its owner. One lock either way, whatever the number of agents.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.models import ErasureRequest
from governance.retention.held import holds_in_force, threads_kept_by
from memoryapp.errors import DomainError
from memoryapp.models import Agent, LegalHold, Thread
from memoryapp.subjects.erasing import holds_placing

REASON_MAX = 2000
LIFT_REASON_MAX = 500


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
    hold = LegalHold(
        agent=agent,
        user_id=user_id,
        thread_external_id=thread_external_id,
        reason=reason,
        ends_at=ends_at,
        placed_by=placed_by,
    )
    # Before the row: from here to the commit no erasure of the person there begins (module's docstring).
    hold.erasures_running = tuple(_erasures_running(hold))
    hold.save()
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
            # The agents where an erasure of the person had begun: the hold does not stop it there.
            "erasures_running": list(hold.erasures_running),
        },
        person=_hold_person(hold),
    )
    return hold


def _erasures_running(hold: LegalHold) -> list[int]:
    """The agents the hold covers where an erasure of its person runs (`holds_placing`, which holds
    her holds gate to the end of the placing transaction): an agent's own, or a staff request's of
    her in several agents, running now, in the agents it covers."""
    person = _hold_person(hold)
    if not person:  # a thread about nobody, or none yet: no person's erasure takes it
        return []
    agents = (
        [hold.agent_id]
        if hold.agent_id is not None
        else list(Agent.objects.order_by("pk").values_list("pk", flat=True))
    )
    found = holds_placing(agent_ids=agents, user_id=person)
    running = set(found.agent_ids)
    if found.across_agents:
        for covered in ErasureRequest.objects.filter(user_id=person, status=ErasureRequest.Status.RUNNING).values_list(
            "agent_ids", flat=True
        ):
            running |= set(agents) & set(covered) if covered else set(agents)
    return sorted(running)


def _hold_person(hold: LegalHold) -> str:
    """Whom a hold is about: its person, or the owner of its thread (the record names the thread
    by their pseudonym, which their erasure unlinks)."""
    if hold.user_id or not hold.thread_external_id or hold.agent_id is None:
        return hold.user_id
    owner = Thread.objects.filter(agent_id=hold.agent_id, external_id=hold.thread_external_id).values_list(
        "user_id", flat=True
    )
    return owner.first() or ""


@transaction.atomic
def legal_hold_lift(*, hold: LegalHold, lifted_by: str, reason: str) -> bool:
    """Lift a hold now, for the reason typed; False when it was lifted already (nothing changes).

    The reason goes into the audit record as typed: lifting lets an erasure or a prune take what
    the hold kept, and the trail is where an auditor asks why (staff's words, not a person's data;
    the hold's own reason, which may name the matter, stays on the hold).
    """
    reason = reason.strip()
    if not reason:
        raise DomainError("required", "Say why the hold is lifted.", field="reason")
    if len(reason) > LIFT_REASON_MAX:
        raise DomainError("too_long", f"The reason holds at most {LIFT_REASON_MAX} characters.", field="reason")
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
        details={"hold_id": hold.pk, "reason": reason},
        person=_hold_person(hold),
    )
    return True


def holds_lift_counts(*, holds: list[LegalHold]) -> dict[str, int]:
    """What lifting these holds lets go: the threads they keep (from the prune and from an erasure),
    and the erasure requests they stopped (those can then be run again). Counted now; changes nothing."""
    standing = [h for h in holds if h.lifted_at is None]
    # The threads they keep that no other hold in force keeps (those stay kept after the lift).
    others = holds_in_force().exclude(pk__in=[h.pk for h in standing])
    threads = Thread.objects.filter(threads_kept_by(standing)).exclude(threads_kept_by(others))
    ids = {h.pk for h in standing}
    blocked = [
        r
        for r in ErasureRequest.objects.filter(status=ErasureRequest.Status.BLOCKED).only("pk", "blocked_by")
        if ids.intersection(r.blocked_by or [])
    ]
    return {
        "holds": len(standing),
        "lifted_already": len(holds) - len(standing),
        "threads": threads.count() if standing else 0,
        "erasures_blocked": len(blocked),
    }
