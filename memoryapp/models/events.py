"""Change events (ids only, never content) and the webhooks they are delivered to.

An event is written by the service that changes memory, in its transaction, with `seq` NULL. Its
number in the agent's stream is given at COMMIT by a deferred constraint trigger (migration 0013,
`memoryapp_event_number`): it locks the agent's `EventCounter` row and numbers every event of the
transaction after the counter's last number. The lock is held from that moment until the commit
ends, so two transactions of one agent get their numbers in the order they commit, and a reader
that sees seq n+1 sees seq n (see memoryapp/events/services.py for why, and what it costs).
"""

from __future__ import annotations

from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models.expressions import RawSQL

from governance.crypto.fields import SealedTextField
from memoryapp.models.agents import Agent


class Event(models.Model):
    """One change of an agent's memory: its type and the ids it touched (never what they say)."""

    id = models.BigAutoField(primary_key=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    # The agent's stream position: 1, 2, 3... without gaps, in commit order; NULL until its
    # transaction commits (readers never see such a row: it is numbered as it becomes visible).
    seq = models.BigIntegerField(null=True, blank=True)
    type = models.CharField(max_length=40)
    # The thread's external id, when the change is about one ("" otherwise).
    thread_id = models.CharField(max_length=128, blank=True, default="")
    # The ids it touched: entries, items, file versions ... (the type says which).
    ids = models.JSONField(default=list, blank=True)
    # The writing transaction (pg_current_xact_id): how the commit trigger finds the rows to number.
    txid = models.BigIntegerField(db_default=RawSQL("(pg_current_xact_id()::text::bigint)", []), editable=False)
    # When its transaction committed (set by the trigger with the number).
    at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # events_after: an agent's stream from a position (also keeps numbers unique).
            models.UniqueConstraint(fields=["agent", "seq"], name="event_agent_seq_uniq"),
        ]
        indexes = [
            # The commit trigger: this transaction's rows not numbered yet (a tiny partial index).
            models.Index(fields=["txid"], name="event_unnumbered_idx", condition=models.Q(seq__isnull=True)),
            # events_prune: rows older than the retention (they arrive in time order).
            BrinIndex(fields=["at"], name="event_at_brin"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq}"


class EventCounter(models.Model):
    """The last number given in an agent's event stream (locked by the commit trigger)."""

    agent = models.OneToOneField(Agent, on_delete=models.CASCADE, primary_key=True, related_name="+")
    last_seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.agent_id}: {self.last_seq}"


class Webhook(models.Model):
    """Where an agent's events are POSTed, signed with its secret (HMAC-SHA256), set up by operators."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000, help_text="http(s) URL that receives the events (POST, JSON).")
    # Sealed at rest when encryption is on (governance.crypto), under the agent's own key: whoever
    # reads the database (a dump, a replica) cannot sign events as the service. At most 200
    # characters (the form and the service check it); a text column because sealed values are longer.
    secret = SealedTextField(
        help_text="Shared with the receiver: it checks the X-Memory-Signature header with it (left empty: generated).",
    )
    active = models.BooleanField(default=True)
    # Every event of the agent up to this seq was delivered (a 2xx answer): the next batch starts after it.
    delivered_seq = models.BigIntegerField(default=0)
    failures = models.IntegerField(default=0, help_text="Failed attempts since the last delivery that succeeded.")
    last_error = models.TextField(blank=True, default="")
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # After a delivery job failed its last retry, the webhook rests until then (backoff across jobs).
    paused_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            # Who to wake after a commit, and the sweep: the active webhooks of an agent.
            models.Index(fields=["agent"], name="webhook_active_idx", condition=models.Q(active=True)),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} → {self.url}"

    def encryption_owner(self) -> tuple[int | None, str]:
        """Sealed under the agent's key of no person (governance.crypto.envelope)."""
        return (self.agent_id, "")


class WebhookDelivery(models.Model):
    """One attempt to deliver a batch of events to a webhook: what was sent (seqs) and what came back."""

    # Indexed by webhook_delivery_idx, which leads with it.
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries", db_index=False)
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    events = models.IntegerField()
    attempt = models.IntegerField(default=1, help_text="The attempt of this batch (1 = first).")
    ok = models.BooleanField(default=False)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    duration_ms = models.FloatField(default=0)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # The webhook page's newest attempts, and the admin's list of failures.
            models.Index(fields=["webhook", "-at"], name="webhook_delivery_idx"),
            BrinIndex(fields=["at"], name="webhook_delivery_at_brin"),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} seq {self.first_seq}-{self.last_seq} ({'ok' if self.ok else 'failed'})"
