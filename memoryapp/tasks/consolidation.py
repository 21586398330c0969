"""Celery tasks of consolidation (queue `consolidation`): per agent, dedupe, folding and observations.

Beat runs the three ticks (governance.jobs.schedules.SCHEDULES, editable under Periodic tasks); each sends one
job run per agent with memory to work on, and the run calls one pass of memoryapp.consolidation.
"""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job, tick
from governance.models import JobRun
from memoryapp.consolidation.passes import consolidation_job, consolidation_tick
from memoryapp.llm.model import ModelTransientError
from memoryapp.models import ConsolidationPass


@job(
    name="memoryapp.tasks.consolidation_dedupe",
    queue="consolidation",
    transient=(ModelTransientError,),
    retries=2,
    backoff=30,
    backoff_max=300,
)
def consolidation_dedupe(run: JobRun) -> dict[str, Any] | None:
    """Mark stale what repeats or is contradicted, in the agent's scopes with new items; safe to run twice."""
    return consolidation_job(run, ConsolidationPass.DEDUPE)


@job(
    name="memoryapp.tasks.consolidation_fold",
    queue="consolidation",
    transient=(ModelTransientError,),
    retries=2,
    backoff=30,
    backoff_max=300,
)
def consolidation_fold(run: JobRun) -> dict[str, Any] | None:
    """Fold the agent's new lessons into its playbooks (or their drafts, in playbook shadow mode)."""
    return consolidation_job(run, ConsolidationPass.FOLD)


@job(
    name="memoryapp.tasks.consolidation_observations",
    queue="consolidation",
    transient=(ModelTransientError,),
    retries=2,
    backoff=30,
    backoff_max=300,
)
def consolidation_observations(run: JobRun) -> dict[str, Any] | None:
    """Write again the observations whose facts changed; delete those without enough facts."""
    return consolidation_job(run, ConsolidationPass.OBSERVATIONS)


@tick(name="memoryapp.tasks.consolidation_dedupe_tick", queue="consolidation")
def consolidation_dedupe_tick() -> None:
    consolidation_tick(kind=ConsolidationPass.DEDUPE)


@tick(name="memoryapp.tasks.consolidation_fold_tick", queue="consolidation")
def consolidation_fold_tick() -> None:
    consolidation_tick(kind=ConsolidationPass.FOLD)


@tick(name="memoryapp.tasks.consolidation_observations_tick", queue="consolidation")
def consolidation_observations_tick() -> None:
    consolidation_tick(kind=ConsolidationPass.OBSERVATIONS)
