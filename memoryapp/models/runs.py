from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import BrinIndex, GinIndex
from django.db import models

from governance.crypto.fields import SealedJSONField
from memoryapp.ids import new_id
from memoryapp.models.agents import Agent
from memoryapp.models.threads import Thread


def new_run_id() -> str:
    return new_id("run")


class ThreadRun(models.Model):
    """A run of an agent on a thread (002's "call"), from its start to its finish.

    At most one is running per thread (`thread_run_one_running`); it holds the thread until it
    finishes, is interrupted by another run, or its lease (`expires_at`, moved on by each write
    that carries the run's id) runs out because its client went away.
    """

    class Status(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        INTERRUPTED = "interrupted"
        EXPIRED = "expired"

    id = models.CharField(max_length=40, primary_key=True, default=new_run_id, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # Indexed by thread_run_thread_idx, which leads with it.
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="runs", db_index=False)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # The run that interrupted this one.
    ended_by = models.CharField(max_length=40, blank=True, default="")
    # Its event ledger (000 `RunLedger`, memoryapp.ledger): the number of the last event published
    # (events are 1, 2, 3 ... within the run, handed out under this row's lock), how the ledger
    # ended ("" while it takes events, else `settled` or `faulted`: nothing more is taken), and the
    # latest snapshot an event carried (000 `SnapshotAccumulator`), kept after the ledger ends and
    # deleted with the run. Sealed at rest under the thread's person's key, as entries are.
    ledger_seq = models.BigIntegerField(default=0)
    ledger_outcome = models.CharField(max_length=8, blank=True, default="")
    snapshot = SealedJSONField(null=True, blank=True)
    snapshot_seq = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            # Two processes starting runs at once: the database keeps one running per thread.
            models.UniqueConstraint(
                fields=["thread"], condition=models.Q(status="running"), name="thread_run_one_running"
            ),
        ]
        indexes = [
            # run_for_agent: a run by id within its agent (the pk), runs of a thread newest first.
            models.Index(fields=["thread", "-started_at"], name="thread_run_thread_idx"),
        ]

    def __str__(self) -> str:
        return self.id

    def encryption_owner(self) -> tuple[int | None, str]:
        return (self.agent_id, self.thread.user_id)


class RunEvent(models.Model):
    """One event a run published to its ledger (000 `RunEvent`): its kind and body, in the run's order.

    Deltas and tool events are kept in a bounded window (the newest LEDGER_WINDOW of the run, see
    memoryapp.ledger); `settled` and `faulted` are kept as long as the run. The body holds what the
    model said (deltas, snapshots): sealed at rest under the thread's person's key.
    """

    id = models.BigAutoField(primary_key=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    # The owner of the sealed body is the thread's person; a change of the thread's person
    # reseals the rows of every model with a `thread` (memoryapp.threads.services).
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="+", db_index=False)
    run = models.ForeignKey(ThreadRun, on_delete=models.CASCADE, related_name="+", db_index=False)
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=16)
    body = SealedJSONField(default=dict, blank=True)
    at = models.DateTimeField()

    class Meta:
        constraints = [
            # ledger_events_after: a run's events from a position; the window's delete by range.
            models.UniqueConstraint(fields=["run", "seq"], name="run_event_run_seq_uniq"),
        ]
        indexes = [
            # A thread's delete (and the person change's reseal): its runs' events.
            models.Index(fields=["thread"], name="run_event_thread_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.kind}"

    def encryption_owner(self) -> tuple[int | None, str]:
        return (self.agent_id, self.thread.user_id)


class AccessLog(models.Model):
    """What one context build or search sent to an agent: the ids of the items and entries, with
    the agent, the thread (none for a search outside a thread), the person and the time. Ids only."""

    class Source(models.TextChoices):
        CONTEXT = "context"
        SEARCH = "search"

    id = models.BigAutoField(primary_key=True)
    # Indexed by access_log_agent_user_idx, which leads with it.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    # A thread's rows go with it (the thread's delete cascades to them in one statement).
    thread = models.ForeignKey(Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # The person the request was about (the thread's user_id, or a search's user_id): erasure finds
    # a person's rows by it.
    user_id = models.CharField(max_length=128, blank=True, default="")
    source = models.CharField(max_length=10, choices=Source.choices)
    at = models.DateTimeField()
    item_ids = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    entry_ids = ArrayField(models.CharField(max_length=40), default=list, blank=True)

    class Meta:
        indexes = [
            # item admin page, erasure: the rows that sent an item (`item_ids @> ARRAY[id]`).
            GinIndex(fields=["item_ids"], name="access_log_items_gin"),
            # erasure: the rows that sent a person's entries (`entry_ids && ARRAY[...]`).
            GinIndex(fields=["entry_ids"], name="access_log_entries_gin"),
            # erasure by person: the rows of requests about them.
            models.Index(fields=["agent", "user_id"], name="access_log_agent_user_idx"),
            # access_log_prune: rows older than the retention (rows arrive in time order).
            BrinIndex(fields=["at"], name="access_log_at_brin"),
        ]

    def __str__(self) -> str:
        return f"{self.source}@{self.at:%Y-%m-%d %H:%M:%S}"
