"""The scheduled passes: per agent, one job run of each kind goes over the agent's scopes.

Beat sends a tick (governance.jobs.schedules.SCHEDULES); the tick sends one job run per agent with work
(`consolidation_request`), deduplicated while one is queued; the run goes over at most
CONSOLIDATION_MAX_SCOPES scopes and keeps where each stopped (ConsolidationState), so a pass that
ran out of its caps goes on at the next run. Every model call made in a run adds its usage (and
cost) to the run. With no language model (LLM_PROVIDER=none) a run is skipped and says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from governance.audit.pseudonyms import pseudonym_names
from governance.jobs.broker import job_enqueue
from governance.jobs.runs import job_progress, job_skip
from governance.models import JobRun
from memoryapp.consolidation.dedupe import scope_dedupe
from memoryapp.consolidation.fold import playbook_fold
from memoryapp.consolidation.observations import observations_refresh
from memoryapp.consolidation.selectors import dedupe_scopes, fold_scopes, observation_scopes
from memoryapp.consolidation.state import state_of
from memoryapp.errors import DomainError
from memoryapp.items.rules import Scope
from memoryapp.llm.model import ModelError, ModelUnavailable
from memoryapp.llm.port import model_available, recording_usage
from memoryapp.models import Agent, ConsolidationPass, ConsolidationState, MemoryItem
from memoryapp.models.choices import ItemKind, ItemStatus
from memoryapp.subjects.erasing import PERSON_BEING_ERASED, person_being_erased

logger = logging.getLogger(__name__)

# The job each kind of pass runs as (memoryapp.tasks.consolidation), sent by name.
JOB_TASKS: dict[str, str] = {
    ConsolidationPass.DEDUPE: "memoryapp.tasks.consolidation_dedupe",
    ConsolidationPass.FOLD: "memoryapp.tasks.consolidation_fold",
    ConsolidationPass.OBSERVATIONS: "memoryapp.tasks.consolidation_observations",
}
NEEDS: dict[str, str] = {
    ConsolidationPass.DEDUPE: "marking repeated items stale",
    ConsolidationPass.FOLD: "folding lessons into the playbook",
    ConsolidationPass.OBSERVATIONS: "writing observations",
}


def job_kind(kind: str) -> str:
    return f"consolidation_{kind}"


def _label(agent_id: int, scope: Scope) -> dict[str, str]:
    """The scope as a job's result (and the log) names it: the person, and a thread of theirs, only
    by their keyed pseudonyms (governance.audit.pseudonyms), which their erasure makes unlinkable; a
    thread of no one by its id."""
    if not scope.user_id:
        return {"person": "", "project_id": scope.project_id, "thread_id": scope.thread_id}
    names = pseudonym_names(agent_id=agent_id, user_id=scope.user_id, also=[scope.thread_id])
    return {"person": names[scope.user_id], "project_id": scope.project_id, "thread_id": names.get(scope.thread_id, "")}


def dedupe_pass(*, agent: Agent, run: JobRun | None = None) -> dict[str, Any]:
    """Dedupe the scopes with items newer than where their last pass stopped, unfinished ones first.

    Each scope gets one `scope_dedupe` with the caps of the settings, from its cursor; the cursor
    and whether the scope is done are kept for the next run.
    """
    states = {
        (s.user_id, s.project_id, s.thread_id): s
        for s in ConsolidationState.objects.filter(agent=agent, pass_kind=ConsolidationPass.DEDUPE)
    }
    due: list[tuple[bool, float, Scope]] = []
    for scope, newest in dedupe_scopes(agent=agent):
        state = states.get((scope.user_id, scope.project_id, scope.thread_id))
        if state is not None and state.complete and state.through is not None and newest <= state.through:
            continue  # nothing recorded since its last whole pass
        due.append((state is not None and not state.complete, -(state.updated_at.timestamp() if state else 0.0), scope))
    due.sort(key=lambda d: (not d[0], -d[1]))
    return _over_scopes(
        agent=agent,
        run=run,
        scopes=[d[2] for d in due],
        work=lambda scope: _dedupe_scope(agent=agent, scope=scope),
    )


def _dedupe_scope(*, agent: Agent, scope: Scope) -> dict[str, Any]:
    state = state_of(agent=agent, scope=scope, kind=ConsolidationPass.DEDUPE)
    outcome = scope_dedupe(
        agent=agent,
        scope=scope,
        since=state.through,
        since_key=state.through_key,
        max_changes=settings.CONSOLIDATION_MAX_CHANGES,
        max_subjects=settings.CONSOLIDATION_MAX_SUBJECTS,
    )
    with transaction.atomic():
        locked = state_of(agent=agent, scope=scope, kind=ConsolidationPass.DEDUPE, for_update=True)
        locked.through, locked.through_key = outcome.through, outcome.through_key
        locked.complete = outcome.complete
        locked.save()
    return {
        "stale": len(outcome.stale),
        "complete": outcome.complete,
        "calls": outcome.calls,
        "unfinished": outcome.unfinished,
    }


def fold_pass(*, agent: Agent, run: JobRun | None = None) -> dict[str, Any]:
    """One fold (up to 20 lessons) in each scope where lessons wait; more lessons wait for the next run."""
    return _over_scopes(
        agent=agent, run=run, scopes=fold_scopes(agent=agent), work=lambda scope: _fold_scope(agent=agent, scope=scope)
    )


def _fold_scope(*, agent: Agent, scope: Scope) -> dict[str, Any] | None:
    outcome = playbook_fold(agent=agent, scope=scope)
    if outcome is None:
        return None
    result = outcome.as_result()
    result["complete"] = not outcome.more and not outcome.unfinished
    return result


def observations_pass(*, agent: Agent, run: JobRun | None = None) -> dict[str, Any]:
    """Refresh the observations of every scope with facts (each at most OBSERVATIONS_MAX_ENTITIES)."""
    return _over_scopes(
        agent=agent,
        run=run,
        scopes=observation_scopes(agent=agent),
        work=lambda scope: _observe_scope(agent=agent, scope=scope),
    )


def _observe_scope(*, agent: Agent, scope: Scope) -> dict[str, Any] | None:
    outcome = observations_refresh(
        agent=agent,
        scope=scope,
        max_entities=settings.OBSERVATIONS_MAX_ENTITIES,
        min_items=settings.OBSERVATIONS_MIN_ITEMS,
    )
    if not (outcome.calls or outcome.deleted):
        return None
    return outcome.as_result()


def _over_scopes(
    *, agent: Agent, run: JobRun | None, scopes: list[Scope], work: Callable[[Scope], dict[str, Any] | None]
) -> dict[str, Any]:
    """Run `work` on scopes until CONSOLIDATION_MAX_SCOPES of them had something to do.

    A scope whose model call failed is reported and left for the next run; when every scope
    tried failed, the first error is raised, so the run fails (or is retried, when transient).
    A scope of a person being erased is skipped, before its model call (or at the refusal of its
    write, when the erasure began meanwhile): her memory goes with the erasure. Counted, never
    named (her pseudonym is not asked for).
    """
    limit = settings.CONSOLIDATION_MAX_SCOPES
    done: list[dict[str, Any]] = []
    errors: list[tuple[Scope, ModelError]] = []
    looked = skipped = 0
    for scope in scopes:
        if len(done) + len(errors) >= limit:
            break
        looked += 1
        if scope.user_id and person_being_erased(agent_id=agent.pk, user_id=scope.user_id):
            skipped += 1
            continue
        try:
            result = work(scope)
        except ModelUnavailable:
            raise
        except ModelError as exc:
            logger.warning("consolidation of %s failed: %s", _label(agent.pk, scope), exc)
            errors.append((scope, exc))
            continue
        except DomainError as exc:
            if exc.code != PERSON_BEING_ERASED:
                raise
            skipped += 1
            continue
        if result is not None:
            done.append({**_label(agent.pk, scope), **result})
        if run is not None:
            job_progress(run, done=looked, total=len(scopes))
    if errors and not done:
        raise errors[0][1]
    complete = looked == len(scopes) and not errors and not skipped and all(r.get("complete", True) for r in done)
    return {
        "scopes": done,
        "scopes_looked_at": looked,
        "scopes_skipped": skipped,
        "scopes_with_work": len(scopes),
        "errors": [{**_label(agent.pk, s), "error": str(e)[:300]} for s, e in errors],
        "complete": complete,
    }


PASSES: dict[str, Callable[..., dict[str, Any]]] = {
    ConsolidationPass.DEDUPE: dedupe_pass,
    ConsolidationPass.FOLD: fold_pass,
    ConsolidationPass.OBSERVATIONS: observations_pass,
}


def consolidation_job(run: JobRun, kind: str) -> dict[str, Any] | None:
    """The body of a consolidation job run: skipped, with why, when it cannot run."""
    agent = Agent.objects.filter(pk=int((run.arguments or {}).get("agent_id") or 0)).first()
    if agent is None:
        job_skip(run, "the agent was deleted")
        return None
    if not model_available():
        job_skip(run, f"no language model is configured (LLM_PROVIDER=none): {NEEDS[kind]} needs one")
        return None
    try:
        with recording_usage(run):
            return PASSES[kind](agent=agent, run=run)
    except ModelUnavailable as exc:
        job_skip(run, f"no language model is available: {exc}")
        return None


def consolidation_request(*, agent: Agent, kind: str) -> JobRun:
    """Enqueue the agent's pass of `kind`; one queued run per agent and kind."""
    return job_enqueue(
        kind=job_kind(kind),
        task_name=JOB_TASKS[kind],
        arguments={"agent_id": agent.pk, "agent": agent.slug},
        agent_id=agent.pk,
        dedupe_key=f"consolidation:{kind}:{agent.pk}",
    )


def consolidation_tick(*, kind: str) -> int:
    """Beat: send the pass of `kind` of every active agent that has memory it could work on."""
    items = MemoryItem.objects.filter(status=ItemStatus.ACTIVE, expired_at__isnull=True)
    if kind == ConsolidationPass.FOLD:
        items = items.filter(kind=ItemKind.LESSON)
    agent_ids = set(items.values_list("agent_id", flat=True).distinct())
    sent = 0
    for agent in Agent.objects.filter(active=True, pk__in=agent_ids).order_by("pk"):
        consolidation_request(agent=agent, kind=kind)
        sent += 1
    return sent
