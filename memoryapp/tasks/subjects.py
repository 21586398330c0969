"""Celery tasks of the subject index (memoryapp.subjects): a person's mentions found again."""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job
from governance.models import JobRun
from memoryapp.subjects.index import subject_index_rebuild


@job(name="memoryapp.tasks.subject_index_rebuild", queue="default")
def subject_index_rebuild_job(run: JobRun) -> dict[str, Any]:
    """The rows of one agent naming one person, by their registered identifiers (idempotent)."""
    found = subject_index_rebuild(agent_id=int(run.arguments["agent_id"]), user_id=str(run.arguments["user_id"]))
    return {"mentions": {table: len(ids) for table, ids in found.items()}}
