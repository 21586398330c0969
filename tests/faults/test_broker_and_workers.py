"""Fault tests: the broker taken away and brought back, worker processes killed in the middle of a job.

Each test runs its own redis-server (tests.kit.faults.PrivateRedis, never the shared one) and real
`celery worker` processes on the test database. They poll with generous deadlines and never
assert how long anything took. Marked `fault`; `make test` runs them with the rest.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction
from freezegun import freeze_time

from governance.models import JobRun
from governance.tasks import jobs_sweep
from memoryapp.compaction.plan import SUMMARIZE
from memoryapp.compaction.services import compaction_request
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import HISTORY_TYPES
from memoryapp.search.indexing import embedding_debounce_key, embedding_schedule, embedding_sweep
from memoryapp.tasks.embedding import embed_sweep
from tests.kit.api import Caller
from tests.kit.factories import EntryFactory, ThreadFactory
from tests.kit.faults import ChatServer, Worker, broker_at, private_redis, wait_for

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

OPEN = (JobRun.Status.QUEUED, JobRun.Status.RUNNING)


def _without_vector(thread: Thread) -> int:
    return (
        Entry.objects.filter(thread=thread, type__in=HISTORY_TYPES, embedding__isnull=True, redacted_at__isnull=True)
        .exclude(text="")
        .count()
    )


def _conversation(thread: Thread, turns: int = 6) -> None:
    for i in range(turns):
        EntryFactory(thread=thread, role="user", content=f"user message {i}: please keep the budget under {i}00 euros")
        EntryFactory(thread=thread, role="assistant", content=f"assistant reply {i}")


def test_jobs_asked_for_while_the_broker_is_away_all_run_once_it_is_back(alice: Caller, settings: Any) -> None:
    """Writes, an async compaction and an async extraction answer as usual while Redis is down;
    once it is back, beat's sweeps hand the runs over and a real worker finishes every one."""
    settings.JOB_UNSENT_GRACE_SECONDS = 0  # the sweep below stands for beat's, a minute later
    with private_redis() as redis_server, ChatServer().running() as model, broker_at(redis_server.url, settings):
        assert alice.client.post("/api/v1/threads", {"id": "t-outage"}, format="json").status_code == 201
        thread = Thread.objects.get(agent=alice.agent, external_id="t-outage")
        redis_server.kill()

        for i in range(6):
            for role, text in (("user", f"user message {i}: keep it under {i}00 euros"), ("assistant", f"reply {i}")):
                answer = alice.client.post(
                    "/api/v1/threads/t-outage/entries", {"role": role, "content": text}, format="json"
                )
                assert answer.status_code == 201, answer.content
        compact = alice.client.post(
            "/api/v1/threads/t-outage/compact",
            {"strategy": SUMMARIZE, "preserve_recent_turns": 2, "async": True},
            format="json",
        )
        assert compact.status_code == 202, compact.content
        extract = alice.client.post("/api/v1/threads/t-outage/extract", {"async": True}, format="json")
        assert extract.status_code == 202, extract.content

        kinds = set(JobRun.objects.values_list("kind", flat=True))
        assert {"embedding", "compaction", "extraction"} <= kinds, kinds
        assert not JobRun.objects.exclude(status=JobRun.Status.QUEUED).exists()
        assert not JobRun.objects.filter(sent_at__isnull=False).exists()  # the broker took none of them
        assert _without_vector(thread) == 12

        redis_server.start()  # back, and empty
        jobs_sweep()  # what beat sends every minute
        embed_sweep()
        assert not JobRun.objects.filter(sent_at__isnull=True).exists()
        worker = Worker(redis_url=redis_server.url, queues="default,embedding,extraction,governance", env=model.env)
        try:
            wait_for("every job run to end", lambda: not JobRun.objects.filter(status__in=OPEN).exists())
            wait_for("every entry to have its vector", lambda: _without_vector(thread) == 0)
        except AssertionError:
            raise AssertionError(worker.log_tail()) from None
        finally:
            worker.stop()

    runs = {run.kind: run for run in JobRun.objects.all()}
    assert {run.status for run in runs.values()} == {JobRun.Status.SUCCEEDED}, [
        (r.kind, r.status, r.error) for r in runs.values()
    ]
    assert runs["compaction"].result["compacted"] is True
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 1
    assert runs["extraction"].attempts == 1


def _requeued(run: JobRun) -> bool:
    current = JobRun.objects.get(pk=run.pk)
    return current.status != JobRun.Status.RUNNING or current.attempts > 1


def _compaction_with_its_model_call_held(alice: Caller, model: ChatServer) -> tuple[JobRun, Thread]:
    thread = Thread.objects.get(agent=alice.agent, external_id="t-kill")
    with transaction.atomic():
        run = compaction_request(thread=thread, strategy=SUMMARIZE, options={"preserve_recent_turns": 2})
    wait_for("the compaction job to be in its model call", model.held.is_set)
    run.refresh_from_db()
    assert run.status == JobRun.Status.RUNNING and run.attempts == 1
    return run, thread


def test_a_pool_process_killed_in_the_middle_of_a_job_is_requeued_at_once_and_the_job_ends(
    alice: Caller, settings: Any
) -> None:
    """kill -9 of the pool process running a job: the worker rejects its message back to the queue
    (acks_late + reject_on_worker_lost), the next pool process claims the run once its dead holder's
    lock is gone, and the job ends with one compaction written, no sweep needed."""
    _conversation(
        ThreadFactory(agent=alice.agent, external_id="t-kill")
    )  # eagerly embedded, before the broker is switched
    with (
        private_redis() as redis_server,
        ChatServer(hold_first=True).running() as model,
        broker_at(redis_server.url, settings),
    ):
        worker = Worker(redis_url=redis_server.url, queues="extraction", env=model.env)
        try:
            run, thread = _compaction_with_its_model_call_held(alice, model)
            [pool_process] = worker.pool_processes()
            os.kill(pool_process, signal.SIGKILL)
            wait_for("the run to end", lambda: JobRun.objects.filter(pk=run.pk).exclude(status__in=OPEN).exists())
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{worker.log_tail()}") from None
        finally:
            worker.stop()
        log = worker.log.read_text(errors="replace")
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED and run.result["compacted"] is True, (run.status, run.error)
    assert run.attempts == 2
    assert "WorkerLostError" in log
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 1
    assert model.requests == 2


def test_a_worker_killed_whole_in_the_middle_of_a_job_is_requeued_by_the_sweep_and_the_job_ends(
    alice: Caller, settings: Any
) -> None:
    """kill -9 of the whole worker (main process and pool): its message waits in Redis for the
    visibility timeout (half an hour), but the run's lock went with the worker, so the job sweep
    requeues it and the restarted worker finishes it."""
    _conversation(ThreadFactory(agent=alice.agent, external_id="t-kill"))
    with (
        private_redis() as redis_server,
        ChatServer(hold_first=True).running() as model,
        broker_at(redis_server.url, settings),
    ):
        first = Worker(redis_url=redis_server.url, queues="extraction", env=model.env)
        try:
            run, thread = _compaction_with_its_model_call_held(alice, model)
        finally:
            first.kill_all()
        run.refresh_from_db()
        assert run.status == JobRun.Status.RUNNING  # nothing else would ever move it

        restarted = Worker(redis_url=redis_server.url, queues="extraction", env=model.env)
        try:
            # Beat's sweep, every minute: it requeues the run as soon as PostgreSQL freed the lock.
            wait_for("the sweep to requeue the run", lambda: jobs_sweep() or _requeued(run))
            wait_for("the run to end", lambda: JobRun.objects.filter(pk=run.pk).exclude(status__in=OPEN).exists())
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{restarted.log_tail()}") from None
        finally:
            restarted.stop()
    run.refresh_from_db()
    assert run.status == JobRun.Status.SUCCEEDED and run.result["compacted"] is True, (run.status, run.error)
    assert run.attempts == 2
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 1


def test_a_job_killed_by_its_hard_time_limit_fails_at_once_and_is_not_run_again(settings: Any) -> None:
    """Celery's worker kills the pool process of a job past its hard time limit: the run is failed
    right away, saying so, instead of staying `running` for the sweep to requeue it into the same
    time limit up to LOST_RUN_MAX_ATTEMPTS times."""
    from governance.jobs.broker import job_enqueue
    from tests.kit.worker_jobs import TINY_TIME_LIMIT, outlives_its_time_limit

    with private_redis() as redis_server, broker_at(redis_server.url, settings):
        worker = Worker(redis_url=redis_server.url, queues="governance", include="tests.kit.worker_jobs")
        try:
            with transaction.atomic():
                run = job_enqueue(kind="test", task_name=outlives_its_time_limit.name, arguments={})
            wait_for("the run to start", lambda: JobRun.objects.filter(pk=run.pk, attempts=1).exists())
            wait_for(
                "the run to end",
                lambda: JobRun.objects.filter(pk=run.pk).exclude(status__in=OPEN).exists(),
                timeout=60,
            )
            jobs_sweep()  # what beat would do next: nothing is left for it
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{worker.log_tail()}") from None
        finally:
            worker.stop()
        log = worker.log.read_text(errors="replace")
    run.refresh_from_db()
    assert run.status == JobRun.Status.FAILED, (run.status, run.error)
    assert f"time limit of {TINY_TIME_LIMIT} s exceeded" in run.error
    assert run.attempts == 1
    assert "Hard time limit" in log


def test_a_write_is_not_skipped_on_the_strength_of_a_run_the_embedding_sweep_sent_at_once(
    alice: Caller, settings: Any
) -> None:
    """A write's debounce finds no mark and takes its `before`; the embedding sweep (beat) commits
    the agent's run, with no countdown, before the write's `job_enqueue` looks for a queued run.
    The write reuses that run, which a worker starts at once: announcing `before + countdown` for
    it would let this process skip the writes of the next second, whose entries no run then reads
    (they wait for the next sweep). The interleaving, a matter of milliseconds in production, is
    forced here by the sweep's session holding the runs' table until the write waits for it."""
    key = embedding_debounce_key(alice.agent.pk)
    with private_redis() as redis_server, broker_at(redis_server.url, settings):
        worker = Worker(redis_url=redis_server.url, queues="embedding")
        try:
            thread = ThreadFactory(agent=alice.agent, external_id="t-sweep-race")
            waiting = threading.Event()
            errors: list[BaseException] = []
            swept: list[Any] = []

            def sweep() -> None:
                try:
                    with transaction.atomic(), connection.cursor() as cursor:
                        cursor.execute(f"LOCK TABLE {JobRun._meta.db_table} IN EXCLUSIVE MODE")
                        waiting.set()

                        def write_waits() -> bool:
                            # SELECT ... FOR UPDATE (job_enqueue's look for a queued run) asks RowShareLock.
                            cursor.execute(
                                "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'RowShareLock'"
                                " AND relation = %s::regclass",
                                [JobRun._meta.db_table],
                            )
                            return bool(cursor.fetchone()[0])

                        wait_for("the write's debounce to look for a queued run", write_waits, every=0.05)
                        swept.append(embedding_sweep())  # sends the agent's run as it commits, with no countdown
                except BaseException as error:
                    errors.append(error)
                finally:
                    connection.close()

            sweeping = threading.Thread(target=sweep)
            sweeping.start()
            assert waiting.wait(30), "the sweep did not take the lock"
            # The first write: its entry committed, then its after-commit hook (as `entry_add`'s).
            first = Entry.objects.create(
                agent=alice.agent,
                thread=thread,
                seq=10_000,  # clear of the seqs `entry_add` hands out
                role="user",
                content="first, embedded by the sweep's run",
                text="first, embedded by the sweep's run",
                created_at=thread.created_at,
                content_hash="f" * 32,
            )
            started = time.time()
            embedding_schedule(agent_id=alice.agent.pk)
            sweeping.join()
            assert not errors, errors
            # One run: the sweep's (it committed first, the write waiting for its lock), which the
            # write found and reused.
            assert swept == [[alice.agent.pk]]
            assert JobRun.objects.filter(dedupe_key=key).count() == 1
            wait_for("the sweep's run to embed the first entry", lambda: _without_vector(thread) == 0)
            assert Entry.objects.get(pk=first.pk).embedding is not None

            # Half a second after the first write by this process's clock (the sweep's run, sent at
            # once, started and read its rows before: an idle worker takes it within milliseconds).
            with freeze_time(datetime.fromtimestamp(started + 0.5, tz=UTC)):
                second = EntryFactory(thread=thread, role="user", content="second, written after that run read")
            open_run = JobRun.objects.filter(dedupe_key=key, status__in=OPEN).exists()
            assert open_run or _without_vector(thread) == 0, "no run will read the second entry: it waits for the sweep"
            wait_for("the second entry's vector", lambda: _without_vector(thread) == 0)
            assert Entry.objects.get(pk=second.pk).embedding is not None
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{worker.log_tail()}") from None
        finally:
            worker.stop()
