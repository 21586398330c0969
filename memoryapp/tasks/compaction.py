"""Celery tasks of the compaction area (queue `extraction`: model work, away from governance)."""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job
from governance.models import JobRun
from memoryapp.compaction.auto import auto_compaction_job
from memoryapp.compaction.services import compaction_job


@job(name="memoryapp.tasks.compact_thread", queue="extraction")
def compact_thread(run: JobRun) -> dict[str, Any] | None:
    """Compact one thread as its job run says (strategy, options); safe to run twice."""
    return compaction_job(run)


@job(name="memoryapp.tasks.auto_compact_thread", queue="extraction")
def auto_compact_thread(run: JobRun) -> dict[str, Any] | None:
    """Compact one thread that passed its automatic compaction trigger, checking it again first."""
    return auto_compaction_job(run)
