"""Celery tasks of the extraction area (queue `extraction`)."""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job
from governance.models import JobRun
from memoryapp.extraction.services import extraction_debounce_key, extraction_job


def _debounce_key(run: JobRun) -> str:
    thread_pk = (run.arguments or {}).get("thread_pk")
    return extraction_debounce_key(int(thread_pk)) if thread_pk is not None else ""


@job(name="memoryapp.tasks.extract_thread", queue="extraction", debounce=_debounce_key)
def extract_thread(run: JobRun) -> dict[str, Any] | None:
    """Extract memory items from one thread's new entries; safe to run twice."""
    return extraction_job(run)
