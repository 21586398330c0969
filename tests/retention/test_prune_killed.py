"""A prune whose worker is killed (kill -9, main process and pool) between batches loses nothing:
the run is requeued by the sweep, claimed again, goes on from its saved position, and ends in the
state, and with the counts, its dry run announced."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from governance.models import AuditRecord, JobRun
from governance.retention.services import retention_prune, retention_prune_request
from governance.tasks import jobs_sweep
from memoryapp.models import Agent, MemoryItem, Thread
from tests.kit.factories import AgentFactory, MemoryItemFactory
from tests.kit.faults import Worker, broker_at, private_redis, wait_for
from tests.retention.world import NOW, age_item, aged_thread, policy

pytestmark = [pytest.mark.fault, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OPEN = (JobRun.Status.QUEUED, JobRun.Status.RUNNING)


def _world() -> list[str]:
    """Twelve of alice's threads past the 30-day TTL, four within it, old rejected items; the ids kept."""
    alice: Agent = AgentFactory(slug="alice")
    policy(thread_ttl_days=30, inactive_item_days=30)
    for n in range(12):
        aged_thread(alice, f"old-{n:02}", days=40 + n, turns=2)
    for n in range(4):
        aged_thread(alice, f"new-{n}", days=n, turns=2)
    for n in range(3):
        age_item(MemoryItemFactory(agent=alice, attribute=f"r{n}"), 60, status="rejected")
    return [f"new-{n}" for n in range(4)]


def test_a_prune_killed_between_batches_is_rerun_to_the_same_end_state(settings: Any) -> None:
    survivors = _world()
    announced = retention_prune(as_of=NOW, dry_run=True).report()
    assert announced["counts"]["threads_deleted"] == 12

    # One row or thread a batch, half a second apart: the kill lands between batches.
    slow = {"PRUNE_BATCH": "1", "PRUNE_PAUSE_SECONDS": "0.5"}
    with private_redis() as redis_server, broker_at(redis_server.url, settings):
        first = Worker(redis_url=redis_server.url, queues="governance", env=slow)
        try:
            with transaction.atomic():
                run = retention_prune_request(as_of=NOW, actor="test")
            wait_for("a few threads deleted", lambda: _threads_deleted(run) >= 3, timeout=120)
        finally:
            first.kill_all()
        run.refresh_from_db()
        assert run.status == JobRun.Status.RUNNING
        saved = run.result
        assert "position" in saved and 0 < saved["counts"]["threads_deleted"] < 12
        # What the saved position says was done is done, and nothing else.
        left_then = Thread.objects.filter(external_id__startswith="old-").count()
        assert left_then == 12 - saved["counts"]["threads_deleted"]
        assert MemoryItem.objects.filter(status="rejected").count() == 3 - saved["counts"]["inactive_items_deleted"]

        restarted = Worker(redis_url=redis_server.url, queues="governance", env=slow)
        try:
            wait_for("the sweep to requeue the run", lambda: jobs_sweep() or _requeued(run), timeout=120)
            wait_for(
                "the run to end",
                lambda: JobRun.objects.filter(pk=run.pk).exclude(status__in=OPEN).exists(),
                timeout=180,
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{restarted.log_tail()}") from None
        finally:
            restarted.stop()

    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED, run.error
    assert run.attempts == 2
    assert run.result["counts"] == announced["counts"]
    # The dry run lists the ids staff check; the real run names each pruned thread by its owner's
    # pseudonym, as every audit record does (the id the client chose may name the person).
    named = run.result["thread_ids"]
    assert len(named) == len(announced["thread_ids"]) and all(n.startswith("psn_") for n in named)
    assert not set(named) & set(announced["thread_ids"])
    assert sorted(Thread.objects.values_list("external_id", flat=True)) == survivors
    assert not MemoryItem.objects.filter(status="rejected").exists()
    assert AuditRecord.objects.filter(action="retention.prune").count() == 1
    assert AuditRecord.objects.filter(action="thread.delete").count() == 12


def _requeued(run: JobRun) -> bool:
    current = JobRun.objects.get(pk=run.pk)
    return current.status != JobRun.Status.RUNNING or current.attempts > 1


def _threads_deleted(run: JobRun) -> int:
    return int(((JobRun.objects.get(pk=run.pk).result or {}).get("counts") or {}).get("threads_deleted", 0))
