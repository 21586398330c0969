"""Legal holds in force: what prune and erasure must leave alone (placing and lifting them is `holds`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from memoryapp.models import LegalHold, Thread


def holds_in_force(*, at: datetime | None = None) -> QuerySet[LegalHold]:
    """Holds placed, not lifted, and not past their end date at `at` (now by default)."""
    moment = at or timezone.now()
    return LegalHold.objects.filter(lifted_at__isnull=True, placed_at__lte=moment).filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=moment)
    )


def holds_blocking(
    *,
    user_id: str | None = None,
    agent_ids: Sequence[int] | None = None,
    thread_ids: Sequence[str] | None = None,
) -> list[LegalHold]:
    """The holds in force now that cover the data an action would change, oldest first.

    Name the data the action touches: the person (`user_id`), the agents it acts in (`agent_ids`;
    None = every agent) and the threads (`thread_ids`: the external ids of the threads it would
    delete or change). A hold covers it when

    1. a person hold has that `user_id`, in one of `agent_ids` or placed for all agents;
    2. a thread hold names one of `thread_ids`, in one of `agent_ids` (thread ids are unique per
       agent only: with `agent_ids` None a hold on that id in any agent blocks, erring on keeping);
    3. with neither `user_id` nor `thread_ids` (an action over agents' whole data), every hold in
       one of `agent_ids`, and every all-agents person hold, covers it; with nothing named at all,
       every hold in force does.
    """
    # (An empty Q() drops out of `|`, so "any agent" is spelled out as a condition that holds.)
    in_agents = Q(pk__isnull=False) if agent_ids is None else Q(agent_id__in=list(agent_ids))
    person = ~Q(user_id="")
    if user_id is None and thread_ids is None:
        covers = in_agents | (person & Q(agent__isnull=True))
    else:
        covers = Q(pk__in=[])
        if user_id:
            covers |= person & Q(user_id=user_id) & (Q(agent__isnull=True) | in_agents)
        if thread_ids:
            covers |= Q(thread_external_id__in=[t for t in thread_ids if t]) & in_agents
    return list(holds_in_force().filter(covers).select_related("agent").order_by("placed_at", "pk"))


def held_threads(*, agent_id: int | None = None) -> Q:
    """A filter of Thread: the threads some hold in force keeps (a person's threads, held threads).

    Holds are few (a legal team's list), so the filter is one condition per hold. With `agent_id`,
    only the holds that reach that agent make it up. Matches nothing when no hold is in force.
    """
    holds = holds_in_force()
    if agent_id is not None:
        holds = holds.filter(Q(agent_id=agent_id) | Q(agent__isnull=True))
    return threads_kept_by(holds.only("agent_id", "user_id", "thread_external_id"))


def threads_kept_by(holds: Iterable[LegalHold]) -> Q:
    """A filter of Thread: the threads these holds keep (one condition per hold; nothing for none)."""
    keeps = Q(pk__in=[])
    for hold in holds:
        in_agent = Q(agent_id=hold.agent_id) if hold.agent_id else Q(pk__isnull=False)
        if hold.thread_external_id:
            keeps |= in_agent & Q(external_id=hold.thread_external_id)
        else:
            keeps |= in_agent & Q(user_id=hold.user_id)
    return keeps


def held_items(*, agent_id: int | None = None) -> Q:
    """A filter of MemoryItem (and other `Scoped` rows): memory a hold in force keeps, which is
    what is about a held person, or scoped to a held thread or to a held person's thread."""
    keeps = Q(pk__in=[])
    holds = holds_in_force()
    if agent_id is not None:
        holds = holds.filter(Q(agent_id=agent_id) | Q(agent__isnull=True))
    for hold in holds.only("agent_id", "user_id", "thread_external_id"):
        in_agent = Q(agent_id=hold.agent_id) if hold.agent_id else Q(pk__isnull=False)
        if hold.thread_external_id:
            keeps |= in_agent & Q(thread_id=hold.thread_external_id)
        else:
            threads = Thread.objects.filter(user_id=hold.user_id)
            if hold.agent_id:
                threads = threads.filter(agent_id=hold.agent_id)
            keeps |= in_agent & (Q(user_id=hold.user_id) | Q(thread_id__in=threads.values("external_id")))
    return keeps
