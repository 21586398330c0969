"""Celery tasks of the items area: the prune of facts whose time to live ran out.

Celery beat runs `items_prune_tick` (governance.jobs.schedules.SCHEDULES, editable in the admin under
Periodic tasks); it enqueues one JobRun-recorded `items_prune_job`, deduplicated while one is
still queued. The prune is idempotent: running it twice removes nothing twice.
"""

from __future__ import annotations

from typing import Any

from governance.jobs.broker import job_enqueue
from governance.jobs.declare import job, tick
from governance.models import JobRun
from governance.retention.held import held_items
from memoryapp.items.facts import facts_prune

PRUNE_JOB_KIND = "items_prune"


@job(name="memoryapp.tasks.items_prune_job", queue="default")
def items_prune_job(run: JobRun) -> dict[str, Any]:
    # Facts a legal hold keeps stay, expired or not (invisible all the same).
    return {"memory_items_deleted": facts_prune(keep=held_items())}


@tick(name="memoryapp.tasks.items_prune_tick", queue="default")
def items_prune_tick() -> None:
    job_enqueue(
        kind=PRUNE_JOB_KIND, task_name="memoryapp.tasks.items_prune_job", arguments={}, dedupe_key=PRUNE_JOB_KIND
    )
