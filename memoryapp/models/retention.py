"""Retention: how long memory is kept (policies), and what must be kept whatever they say (legal holds)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from memoryapp.models.agents import Agent


class LegalHold(models.Model):
    """Keep everything about a person, or one thread, out of every prune and erasure.

    A hold targets either a person (`user_id`, within one agent or, with no agent, within all) or
    one thread (`agent` + `thread_external_id`, the id the agent knows it by: a hold is a legal
    record that outlives what it names, so it is not a foreign key the thread's delete would take).
    It is in force from when it is placed until it is lifted or its `ends_at` passes; lifted holds
    stay as the record of what was held, when, and by whom. Rows are never deleted by the service.
    """

    # None: the person is held in every agent's memory. PROTECT: an agent cannot be deleted (with
    # everything it holds) while a hold names it; deactivate it instead.
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    user_id = models.CharField(max_length=128, blank=True, default="")
    thread_external_id = models.CharField(max_length=128, blank=True, default="")
    # Why (a person's words: shown in the admin, never written to the audit trail).
    reason = models.TextField()
    ends_at = models.DateTimeField(null=True, blank=True)
    placed_by = models.CharField(max_length=150, blank=True, default="")
    placed_at = models.DateTimeField(auto_now_add=True)
    lifted_at = models.DateTimeField(null=True, blank=True)
    lifted_by = models.CharField(max_length=150, blank=True, default="")

    # Not stored: the agents where an erasure of the person was running as the hold was placed, which
    # it does not stop (set by governance.retention.holds.legal_hold_place; its audit record keeps them).
    erasures_running: tuple[int, ...] = ()

    class Meta:
        ordering = ["-placed_at"]
        constraints = [
            # Exactly one target: a person (any agent or one), or a thread of one agent.
            models.CheckConstraint(
                condition=(Q(thread_external_id="") & ~Q(user_id=""))
                | (~Q(thread_external_id="") & Q(user_id="") & Q(agent__isnull=False)),
                name="legalhold_one_target",
            ),
        ]
        indexes = [
            # holds_blocking: the holds not lifted (few among the lifted record), by person or thread.
            models.Index(fields=["user_id"], name="legalhold_open_user_idx", condition=Q(lifted_at__isnull=True)),
            models.Index(
                fields=["thread_external_id"],
                name="legalhold_open_thread_idx",
                condition=Q(lifted_at__isnull=True) & ~Q(thread_external_id=""),
            ),
        ]

    def __str__(self) -> str:
        if self.thread_external_id:
            return f"hold #{self.pk} on thread {self.thread_external_id}"
        return f"hold #{self.pk} on user {self.user_id}"

    @property
    def target(self) -> str:
        where = self.agent.slug if self.agent_id and self.agent else "all agents"
        if self.thread_external_id:
            return f"thread {self.thread_external_id} ({where})"
        return f"user {self.user_id} ({where})"


class RetentionPolicy(models.Model):
    """How long an agent's memory is kept; applied by the prune (governance.retention).

    One default policy (no agent) and at most one per agent. The narrowest applies, whole: an
    agent with a policy of its own follows it alone (a rule left blank there is off for that
    agent, even when the default sets it); every other agent follows the default. A blank rule
    keeps everything it would have removed. Audit records are never pruned.
    """

    agent = models.OneToOneField(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # 002 threadTtlSecs, in days: threads whose last write is this old are deleted (delete-thread cascade).
    thread_ttl_days = models.PositiveIntegerField(null=True, blank=True)
    # 002 keepCheckpoints: each thread keeps its newest N compactions; entries wholly before the
    # oldest kept one, older compactions, and the branches left behind go.
    keep_checkpoints = models.PositiveIntegerField(null=True, blank=True)
    # 002 dropBranches: branches rewinds and checkouts left behind are deleted; the active one stays whole.
    drop_branches = models.BooleanField(default=False)
    # Suggested items not reviewed within this many days expire (the review queue shows the deadline).
    suggested_review_days = models.PositiveIntegerField(null=True, blank=True)
    # Superseded, stale and rejected items older than this are removed with their evidence.
    inactive_item_days = models.PositiveIntegerField(null=True, blank=True)
    # Finished job runs older than this are deleted (runs of no agent follow the default policy).
    job_run_days = models.PositiveIntegerField(null=True, blank=True)
    # Tool results a compaction cleared (externalised behind a handle) older than this lose their content.
    tool_result_days = models.PositiveIntegerField(null=True, blank=True)
    # Change events (and webhook delivery attempts) older than this are deleted.
    event_days = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        verbose_name_plural = "retention policies"
        # Running the prune (and its dry run) from the admin: operators and privacy officers.
        permissions = [("run_prune", "Can run the retention prune and its dry run")]
        constraints = [
            # One default: NULL agents are not distinct here.
            models.UniqueConstraint(fields=["agent"], name="retentionpolicy_one_per_agent", nulls_distinct=False),
            models.CheckConstraint(
                condition=Q(keep_checkpoints__isnull=True) | Q(keep_checkpoints__gte=1),
                name="retentionpolicy_keep_at_least_one_checkpoint",
            ),
        ]

    def __str__(self) -> str:
        return f"retention of {self.agent.slug}" if self.agent_id and self.agent else "default retention"
