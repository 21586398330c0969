"""Celery tasks of the recall area: embedding (queue `embedding`)."""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job, tick
from governance.jobs.runs import job_progress, job_skip
from governance.models import JobRun
from memoryapp.search import indexing
from memoryapp.search.embedders import EmbedderError


@job(
    name="memoryapp.tasks.embed_pending",
    queue="embedding",
    transient=(EmbedderError,),
    retries=5,
    backoff=5,
    backoff_max=120,
    soft_time_limit=1500,
    time_limit=1800,
    debounce=lambda run: indexing.embedding_debounce_key(run.arguments.get("agent_id")),
)
def embed_pending(run: JobRun) -> dict[str, Any] | None:
    """Embed the agent's entries and items that have no vector yet (memoryapp.search.indexing)."""
    result = indexing.embed_pending(
        agent_id=run.arguments.get("agent_id"), progress=lambda done: job_progress(run, done=done)
    )
    if "skipped" in result:
        job_skip(run, str(result["skipped"]))
        return None
    return result


@job(
    name="memoryapp.tasks.embed_all_again",
    queue="embedding",
    transient=(EmbedderError,),
    retries=3,
    backoff=5,
    backoff_max=120,
)
def embed_all_again(run: JobRun) -> dict[str, Any]:
    """Re-embed everything (of one agent) with the configured model: the `reembed` command's job."""
    return indexing.reembed_all(
        agent_id=run.arguments.get("agent_id"), progress=lambda done: job_progress(run, done=done)
    )


@tick(name="memoryapp.tasks.embed_sweep", queue="embedding")
def embed_sweep() -> None:
    """Beat, every few minutes: send the embedding job of every agent with something not embedded yet."""
    indexing.embedding_sweep()
