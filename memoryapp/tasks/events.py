"""Celery tasks of change events: webhook deliveries (retried with backoff) and their sweep."""

from __future__ import annotations

from typing import Any

from governance.jobs.declare import job, tick
from governance.jobs.runs import job_skip
from governance.models import JobRun
from memoryapp.events.webhooks import (
    WEBHOOK_RETRIES,
    WEBHOOK_TASK,
    WebhookUnreachable,
    webhook_debounce_key,
    webhook_deliver,
    webhook_retry_waiting,
    webhooks_sweep,
)


@job(
    name=WEBHOOK_TASK,
    queue="default",
    transient=(WebhookUnreachable,),
    retries=WEBHOOK_RETRIES,
    backoff=2,
    backoff_max=300,
    time_limit=180,
    debounce=lambda run: webhook_debounce_key(int((run.arguments or {}).get("webhook_id") or 0)),
)
def webhook_deliver_job(run: JobRun) -> dict[str, Any] | None:
    webhook_id = int((run.arguments or {}).get("webhook_id") or 0)
    if webhook_retry_waiting(webhook_id=webhook_id, run_id=run.pk):
        job_skip(run, "another run of this webhook waits for its retry: it delivers every event after the cursor")
        return None
    # Its attempts count from 1; the last one may not be retried, and then the webhook rests.
    return webhook_deliver(webhook_id=webhook_id, final_attempt=run.attempts > WEBHOOK_RETRIES)


@tick(name="memoryapp.tasks.webhooks_sweep", queue="default")
def webhooks_sweep_tick() -> None:
    webhooks_sweep()
