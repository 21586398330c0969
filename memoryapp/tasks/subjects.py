"""Celery tasks of the subject index (memoryapp.subjects): a person's mentions found again."""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job
from governance.jobs.runs import job_skip
from governance.models import JobRun
from memoryapp.subjects.index import subject_index_person, subject_index_rebuild


@job(name="memoryapp.tasks.subject_index_rebuild", queue="default")
def subject_index_rebuild_job(run: JobRun) -> dict[str, Any] | None:
    """The rows of one agent naming one person, by their registered identifiers (idempotent). The
    run names the person by pseudonym; one that resolves to no one (erased since) is skipped."""
    user_id = subject_index_person(run.arguments)
    if user_id is None:
        job_skip(run, "the person's pseudonym links to no one (erased)")
        return None
    found = subject_index_rebuild(agent_id=int(run.arguments["agent_id"]), user_id=user_id)
    return {"mentions": {table: len(ids) for table, ids in found.items()}}
