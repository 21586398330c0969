"""Celery tasks of the recall area: embedding (queue "embedding", routed by the embed_* name)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from governance.jobs import job_debounce_clear, job_progress, job_run, job_skip
from governance.models import JobRun
from memoryapp.search.embedders import EmbedderError


def _embed_pending_work(run: JobRun) -> dict[str, Any] | None:
    from memoryapp.search.indexing import embed_pending as embed_pending_service
    from memoryapp.search.indexing import embedding_debounce_key

    job_debounce_clear(embedding_debounce_key(run.arguments.get("agent_id")))
    result = embed_pending_service(
        agent_id=run.arguments.get("agent_id"), progress=lambda done: job_progress(run, done=done)
    )
    if "skipped" in result:
        job_skip(run, str(result["skipped"]))
        return None
    return result


@shared_task(
    bind=True,
    name="memoryapp.tasks.embed_pending",
    autoretry_for=(EmbedderError,),
    retry_backoff=5,
    retry_backoff_max=120,
    max_retries=5,
    soft_time_limit=1500,
    time_limit=1800,
)
def embed_pending(self: Any, run_id: int) -> None:
    """Embed the agent's entries and items that have no vector yet (memoryapp.search.indexing)."""
    job_run(
        run_id,
        _embed_pending_work,
        transient=(EmbedderError,),
        final_attempt=self.request.retries >= (self.max_retries or 0),
    )


def _reembed_work(run: JobRun) -> dict[str, Any] | None:
    from memoryapp.search.indexing import reembed_all

    return reembed_all(agent_id=run.arguments.get("agent_id"), progress=lambda done: job_progress(run, done=done))


@shared_task(name="memoryapp.tasks.embed_all_again", autoretry_for=(EmbedderError,), retry_backoff=5, max_retries=3)
def embed_all_again(run_id: int) -> None:
    """Re-embed everything (of one agent) with the configured model: the `reembed` command's job."""
    job_run(run_id, _reembed_work)


@shared_task(name="memoryapp.tasks.embed_sweep", ignore_result=True)
def embed_sweep() -> None:
    """Beat, every few minutes: send the embedding job of every agent with entries or items not
    embedded yet, so writes whose job could not be sent (a broker outage) are embedded anyway.
    The writes' Redis debounce marks are not consulted: a mark left by a run that never started
    must not keep an agent's entries without vectors."""
    from django.db.models import Q

    from memoryapp.models import Entry, MemoryItem
    from memoryapp.models.choices import HISTORY_TYPES
    from memoryapp.search.indexing import embedding_schedule

    pending_entries = Entry.objects.filter(
        Q(embedding__isnull=True), redacted_at__isnull=True, type__in=HISTORY_TYPES
    ).exclude(text="")
    agents = set(pending_entries.values_list("agent_id", flat=True).distinct()[:1000])
    agents |= set(
        MemoryItem.objects.filter(embedding__isnull=True).values_list("agent_id", flat=True).distinct()[:1000]
    )
    for agent_id in sorted(agents):
        embedding_schedule(agent_id=agent_id, debounced=False)
