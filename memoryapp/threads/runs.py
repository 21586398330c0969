"""Busy threads (002 `onBusy`, `busyTimeoutSecs`): an agent marks a run started and finished on a
thread, and a second run on a running thread waits, is rejected or interrupts the first.

It holds across web processes and hosts because the state is a row in PostgreSQL, never a
lock in a process: a partial unique index keeps at most one run `running` per thread, and each
step takes the thread's row lock, the same lock every write of the thread's entries takes.

- A run holds its thread for a lease of the busy timeout, moved on by every write that carries
  the run's id (`run_check`). A client that crashed sends nothing more: its run expires after
  the timeout, and the next run takes the thread.
- `wait` polls (short transactions, never a lock held while waiting) until the running run ends or
  its lease runs out, at most the busy timeout; then `thread_busy`.
- `interrupt` ends the running run at once (`interrupted`, naming the new run) and starts the
  new one. The interrupted run learns it on its next write: `run_check` answers `run_ended`.
  That check runs in the write's own transaction, under the thread's row lock, so a write either
  commits before the interruption or is refused: never after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from governance.audit.chain import audit_append
from governance.jobs.runs import thread_run_cause
from memoryapp.errors import Conflict, DomainError, NotFound
from memoryapp.models import Agent, Thread, ThreadRun
from memoryapp.models.choices import OnBusy
from memoryapp.threads.selectors import thread_for_agent
from memoryapp.threads.services import thread_lock

# How often a waiting start looks again (a short transaction each time).
WAIT_POLL_SECONDS = 0.1
MAX_BUSY_TIMEOUT_SECONDS = 3600


def busy_policy(thread: Thread, agent: Agent) -> tuple[str, int]:
    """(on_busy, busy_timeout_seconds) of a thread: its own, else its agent's."""
    mode = thread.on_busy or agent.on_busy or OnBusy.WAIT
    timeout = thread.busy_timeout_seconds if thread.busy_timeout_seconds is not None else agent.busy_timeout_seconds
    return mode, int(timeout)


def _busy_error(thread: Thread, running: ThreadRun, *, waited: float | None = None) -> Conflict:
    held = running.expires_at.isoformat(timespec="seconds")
    message = f"Thread {thread.external_id} is busy: run {running.id} is running (its lease ends at {held})"
    if waited is not None:
        message += f"; waited {waited:.1f} s"
    return Conflict("thread_busy", message + ".")


def _ended_error(run: ThreadRun) -> Conflict:
    if run.status == ThreadRun.Status.INTERRUPTED:
        how = f"was interrupted by run {run.ended_by}" if run.ended_by else "was interrupted"
    elif run.status == ThreadRun.Status.EXPIRED or run.status == ThreadRun.Status.RUNNING:
        how = "expired: nothing was heard of it within the thread's busy timeout"
    else:
        how = "has finished"
    return Conflict("run_ended", f"Run {run.id} {how}; start a new run.")


def _expire(run: ThreadRun, *, now: datetime) -> None:
    ThreadRun.objects.filter(pk=run.pk, status=ThreadRun.Status.RUNNING).update(
        status=ThreadRun.Status.EXPIRED, ended_at=now
    )
    run.status, run.ended_at = ThreadRun.Status.EXPIRED, now


def _audit_run(run: ThreadRun, thread: Thread, *, outcome: str, actor: str, **details: object) -> None:
    audit_append(
        action="thread.run",
        actor=actor,
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        subject=run.id,
        outcome=outcome,
        details=dict(details),
        person=thread.user_id,
    )


def _try_start(*, thread: Thread, agent: Agent, mode: str, timeout: int, actor: str) -> tuple[bool, ThreadRun]:
    """One attempt, in one transaction under the thread's row lock: (True, the new run), or
    (False, the run that holds the thread: the caller waits or refuses)."""
    with transaction.atomic():
        locked = thread_lock(thread)
        now = timezone.now()
        running = ThreadRun.objects.filter(thread=locked, status=ThreadRun.Status.RUNNING).first()
        if running is not None and running.expires_at <= now:
            _expire(running, now=now)
            _audit_run(running, locked, outcome="expired", actor="system")
            running = None
        if running is not None and mode != OnBusy.INTERRUPT:
            return False, running
        run = ThreadRun(agent=agent, thread=locked, started_at=now, expires_at=now + timedelta(seconds=timeout))
        if running is not None:
            ThreadRun.objects.filter(pk=running.pk).update(
                status=ThreadRun.Status.INTERRUPTED, ended_at=now, ended_by=run.id
            )
            _audit_run(running, locked, outcome="interrupted", actor=actor, by=run.id)
        run.save(force_insert=True)
        _audit_run(run, locked, outcome="started", actor=actor, on_busy=mode)
        return True, run


def threads_running(*, thread_pks: list[int], now: datetime | None = None) -> set[int]:
    """Of these threads, those an agent's run holds now (running, its lease not out): busy for
    the work that must not change a thread under a running agent (the retention prune)."""
    if not thread_pks:
        return set()
    live = ThreadRun.objects.filter(
        thread_id__in=thread_pks, status=ThreadRun.Status.RUNNING, expires_at__gt=now or timezone.now()
    )
    return set(live.values_list("thread_id", flat=True))


def run_start(*, thread: Thread, agent: Agent, actor: str = "") -> ThreadRun:
    """Start a run on the thread, as its busy policy says when another run holds it.

    1. Under the thread's row lock: a running run whose lease ran out is expired; with none left
       running, the new run starts (a lease of the busy timeout).
    2. `reject`: `thread_busy` (409) naming the running run, at once.
    3. `interrupt`: the running run is marked interrupted by the new one, which starts.
    4. `wait`: the lock is let go and the attempt repeated every WAIT_POLL_SECONDS until the
       running run finishes or expires, at most the busy timeout; then `thread_busy`.
    """
    mode, timeout = busy_policy(thread, agent)
    began = time.monotonic()
    while True:
        started, run = _try_start(thread=thread, agent=agent, mode=mode, timeout=timeout, actor=actor)
        if started:
            return run
        waited = time.monotonic() - began
        if mode == OnBusy.REJECT or waited >= timeout:
            raise _busy_error(thread, run, waited=waited if mode == OnBusy.WAIT else None)
        time.sleep(min(WAIT_POLL_SECONDS, max(0.0, timeout - waited)))


def run_for_agent(*, agent: Agent, thread: Thread, run_id: str) -> ThreadRun:
    """A run of the agent's thread by id; another agent's, another thread's or none: 404."""
    run = ThreadRun.objects.filter(pk=run_id, agent=agent, thread=thread).first()
    if run is None:
        raise NotFound("Run")
    return run


def run_check(*, agent: Agent, thread: Thread, run_id: str) -> ThreadRun:
    """Check, in the caller's write transaction, that the run the write carries still holds the
    thread, and move its lease on; `run_ended` (409) when it was interrupted, expired or finished.

    The thread's row is locked first (the order every write and `run_start` take), so an
    interruption waits for this write to commit, or this write sees the interruption.
    """
    locked = thread_lock(thread)
    run = run_for_agent(agent=agent, thread=locked, run_id=run_id)
    now = timezone.now()
    _, timeout = busy_policy(locked, agent)
    if run.status != ThreadRun.Status.RUNNING:
        raise _ended_error(run)
    if run.expires_at <= now:
        # Nobody took the thread yet, but the lease is over: a client that went quiet that long
        # is treated as gone (the next start marks the run expired; this write's transaction
        # rolls back, so it writes nothing here).
        raise _ended_error(run)
    run.expires_at = now + timedelta(seconds=timeout)
    ThreadRun.objects.filter(pk=run.pk).update(expires_at=run.expires_at)
    return run


@transaction.atomic
def run_finish(*, agent: Agent, thread: Thread, run_id: str, actor: str = "") -> ThreadRun:
    """Finish a run: the thread is free for the next. Finishing it again answers it as it is;
    a run that was interrupted or expired answers `run_ended`."""
    locked = thread_lock(thread)
    run = run_for_agent(agent=agent, thread=locked, run_id=run_id)
    if run.status == ThreadRun.Status.FINISHED:
        return run
    if run.status != ThreadRun.Status.RUNNING:
        raise _ended_error(run)
    now = timezone.now()
    ThreadRun.objects.filter(pk=run.pk).update(status=ThreadRun.Status.FINISHED, ended_at=now)
    run.status, run.ended_at = ThreadRun.Status.FINISHED, now
    _audit_run(run, locked, outcome="finished", actor=actor)
    return run


@contextmanager
def run_holding(*, agent: Agent, thread_external_id: str, run_id: str | None) -> Iterator[None]:
    """A write of the API made while the run `run_id` holds the thread (its `X-Run-Id`): the
    check and the write in one transaction. Without a run id the write is not checked."""
    if not run_id:
        yield
        return
    # The cause outlives the transaction: the jobs the write asks for are sent on its commit.
    with thread_run_cause(run_id), transaction.atomic():
        thread = thread_for_agent(agent=agent, external_id=thread_external_id)
        run_check(agent=agent, thread=thread, run_id=run_id)
        yield


@contextmanager
def run_causing(*, agent: Agent, thread: Thread, run_id: str | None) -> Iterator[None]:
    """Work asked for by the run `run_id` of the thread that writes no entry itself (compact or
    extract now): the run must be the thread's (404 otherwise), and the jobs and model calls made
    in the block name it. No transaction is held (a model call may take minutes)."""
    if not run_id:
        yield
        return
    run_for_agent(agent=agent, thread=thread, run_id=run_id)
    with thread_run_cause(run_id):
        yield


@transaction.atomic
def thread_busy_policy_set(
    *, thread: Thread, on_busy: str | None = None, busy_timeout_seconds: int | None = None, actor: str = ""
) -> Thread:
    """Set a thread's own busy policy ("" / 0 clears it: the agent's applies); audited with the values."""
    locked = thread_lock(thread)
    if on_busy is not None:
        if on_busy and on_busy not in OnBusy.values:
            raise DomainError("invalid_value", f"on_busy must be one of {list(OnBusy.values)}.", field="on_busy")
        locked.on_busy = on_busy
    if busy_timeout_seconds is not None:
        if not 0 <= busy_timeout_seconds <= MAX_BUSY_TIMEOUT_SECONDS:
            raise DomainError(
                "invalid_value",
                f"busy_timeout_seconds must be 1 to {MAX_BUSY_TIMEOUT_SECONDS} (0 clears it).",
                field="busy_timeout_seconds",
            )
        locked.busy_timeout_seconds = busy_timeout_seconds or None
    locked.save(update_fields=["on_busy", "busy_timeout_seconds"])
    audit_append(
        action="thread.busy_policy_set",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        person=locked.user_id,
        subject=locked.external_id,
        outcome="set",
        details={"on_busy": locked.on_busy, "busy_timeout_seconds": locked.busy_timeout_seconds},
    )
    thread.on_busy, thread.busy_timeout_seconds = locked.on_busy, locked.busy_timeout_seconds
    return locked
