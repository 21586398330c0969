"""Scheduling of extraction after new entries: a debounced job per thread."""

from __future__ import annotations

from django.conf import settings

from governance.jobs.broker import debounce_mark, debounce_mark_set, job_debounce_clear
from memoryapp.extraction.services import extraction_debounce_key, extraction_progress, extraction_request
from memoryapp.llm.port import model_available
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import HISTORY_TYPES


def extraction_schedule(*, thread_pk: int) -> None:
    """Send (debounced) the extraction job of a thread after new entries. Cheap and idempotent.

    With no language model (LLM_PROVIDER=none, or `scripted` with no script) nothing is sent:
    a run per write that could only be skipped would bury the job list. The API and the admin
    still create one on request, and it says why it was skipped.
    """

    if not model_available():
        return
    debounce = settings.EXTRACTION_DEBOUNCE_SECONDS
    # While a run of this thread is pending, a write costs one Redis round trip and nothing more.
    # With the broker away (or resting after a failure), the run is created anyway (one queued
    # run per thread) and sent when the broker is back (the job sweep, or a later enqueue).
    if not debounce_mark_set(debounce_mark(extraction_debounce_key(thread_pk)), ttl=int(debounce) + 300):
        return
    thread = (
        Thread.objects.filter(pk=thread_pk)
        .only("id", "agent_id", "external_id", "extraction", "memory_enabled")
        .first()
    )
    # Events (a compaction entry, a label) after the mark give extraction nothing to read.
    through = int(extraction_progress(thread).get("through_seq") or 0) if thread else 0
    if (
        thread is None
        # 001 `/memory off`: nothing is extracted from the thread (memoryapp.threads.memory_switch).
        or not thread.memory_enabled
        or not Entry.objects.filter(thread_id=thread_pk, seq__gt=through, type__in=HISTORY_TYPES).exists()
    ):
        job_debounce_clear(extraction_debounce_key(thread_pk))
        return
    extraction_request(thread=thread, actor="extraction", countdown=debounce)
