"""What happens after entries are written: the background work they start.

`entry_add` and friends call `after_entries_added` inside their transaction; the capabilities that
follow new entries (embedding, extraction) are told only once it commits (transaction.on_commit),
each through the sender it registered with `entries_added_follow` (and, after a cascade that
cleared vectors, `vectors_cleared_follow`). Threads sit below the
capabilities that read them, so this module names none of them: memoryapp/apps.py wires them at
start. Each sender is idempotent, so a rollback sends nothing and a repeat does nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.db import transaction

from governance.jobs.runs import thread_run_cause, thread_run_current
from memoryapp.models import Entry, Thread

logger = logging.getLogger(__name__)

# A sender: told (agent id, thread pk) after a write that added entries to that thread committed.
Sender = Callable[[int, int], None]
_followers: dict[str, Sender] = {}
ThreadSender = Callable[[Thread], object]
_thread_followers: dict[str, ThreadSender] = {}
# Told (agent id) after a cascade that cleared entries' vectors committed.
AgentSender = Callable[[int], None]
_vector_followers: dict[str, AgentSender] = {}


def entries_added_follow(name: str, send: Sender) -> None:
    """Have `send(agent_id, thread_pk)` called after every committed write that adds entries."""
    _followers[name] = send


def entries_added_follow_thread(name: str, send: ThreadSender) -> None:
    """Have `send(thread)` called after every committed write that adds entries (after the
    senders): the thread as the write left it (its row read under the write's lock, with what the
    write changed), for a check that must not cost a query per write."""
    _thread_followers[name] = send


def after_entries_added(*, thread: Thread, entries: Sequence[Entry]) -> None:
    if not entries:
        return
    agent_id = thread.agent_id
    thread_pk = thread.pk
    # The thread run the write belongs to (its X-Run-Id), for the jobs sent once it committed,
    # which may be after the write's own block ended (an outer transaction).
    cause = thread_run_current()

    def schedule() -> None:
        with thread_run_cause(cause):
            _send(agent_id, thread_pk, thread)

    transaction.on_commit(schedule)


def _send(agent_id: int, thread_pk: int, thread: Thread) -> None:
    # The entries are committed: a broker that cannot take the job must not turn the write
    # into an error the client would retry (and duplicate). A run the broker did not take
    # stays queued and is sent later (governance.jobs: the next write, the job sweep), and
    # the embedding sweep embeds whatever has no vector; the failure is logged.
    for name, send in list(_followers.items()):
        try:
            send(agent_id, thread_pk)
        except Exception:
            logger.exception("could not send the %s job after a write of thread %s", name, thread_pk)
    for name, send_thread in list(_thread_followers.items()):
        try:
            send_thread(thread)
        except Exception:
            logger.exception("could not send the %s job after a write of thread %s", name, thread_pk)


def vectors_cleared_follow(name: str, send: AgentSender) -> None:
    """Have `send(agent_id)` called after every committed cascade that cleared entries' vectors."""
    _vector_followers[name] = send


def after_vectors_cleared(*, agent_id: int) -> None:
    """Entries of the agent lost their vectors in a cascade (the words they were embedded with went):
    the embedding job embeds them again from what remains, once the cascade commits (and not at all
    if it rolls back). A broker that cannot take the job leaves them to the embedding sweep."""

    def schedule() -> None:
        for name, send in list(_vector_followers.items()):
            try:
                send(agent_id)
            except Exception:
                logger.exception("could not send the %s job after a cascade of agent %s", name, agent_id)

    transaction.on_commit(schedule)
