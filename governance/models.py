from __future__ import annotations

from django.conf import settings
from django.db import models

from governance.crypto.fields import SealedJSONField, SealedTextField


class AuditRecord(models.Model):
    """One link of the audit trail: ids, names and outcomes, never content (reference 002).

    hash = sha256(prev_hash + canonical JSON of the record); seq runs 1, 2, 3... without gaps.
    """

    seq = models.BigIntegerField(unique=True)
    at = models.DateTimeField()
    action = models.CharField(max_length=100)
    actor = models.CharField(max_length=200, blank=True, default="")
    agent_id = models.BigIntegerField(null=True, blank=True)
    thread_id = models.CharField(max_length=128, blank=True, default="")
    subject = models.CharField(max_length=300, blank=True, default="")
    outcome = models.CharField(max_length=100, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]
        indexes = [
            # audit_records(action=...), audit_records(thread_id=...)
            models.Index(fields=["action", "seq"], name="audit_action_idx"),
            models.Index(fields=["thread_id", "seq"], name="audit_thread_idx", condition=~models.Q(thread_id="")),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.action}"


class PseudonymKey(models.Model):
    """The secret a person's pseudonyms are made with (governance.audit.pseudonyms): the audit trail
    names a person and their threads by HMAC under it. The person's erasure deletes this row (and,
    with encryption on, the data key it is sealed under), so those pseudonyms link to no one."""

    agent_id = models.BigIntegerField(null=True, blank=True)
    user_id = models.CharField(max_length=200)
    # 32 random bytes, hex; sealed under the person's data key when encryption is on.
    secret = SealedTextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent_id", "user_id"], name="pseudonymkey_person_uniq")]

    def __str__(self) -> str:
        return f"pseudonym key #{self.pk}"

    def encryption_owner(self) -> tuple[int | None, str]:
        return (self.agent_id, self.user_id)


class JobRun(models.Model):
    """One run of a background job, with its progress, result and the model usage it cost."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"

    kind = models.CharField(max_length=60)
    agent_id = models.BigIntegerField(null=True, blank=True)
    arguments = models.JSONField(default=dict, blank=True)
    # Runs asked for with the same key are one run (an idempotent enqueue).
    dedupe_key = models.CharField(max_length=300, blank=True, default="")
    # The Celery task that runs it ("" for a run done in the asking process): what the sweep sends.
    task_name = models.CharField(max_length=200, blank=True, default="")
    # When the broker took its message (the start of this hand-over); null while it never did
    # (sent by the sweep). A resend of a message the broker still holds leaves it as it is.
    sent_at = models.DateTimeField(null=True, blank=True)
    # Not before: the end of the countdown it was sent with (a debounce); never resent before it.
    eta = models.DateTimeField(null=True, blank=True)
    # Times the job sweep sent this hand-over again, and when it looks at the run next.
    resends = models.IntegerField(default=0)
    next_check_at = models.DateTimeField(null=True, blank=True)
    # The broker message (Celery task id) whose process claimed the run: its redelivery waits for
    # the run's lock, another message of the same run does not.
    message_id = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(null=True, blank=True)
    # Sealed at rest when encryption is on (governance.crypto): under the agent's key, or the key of
    # no agent (the run's end writes it with an UPDATE).
    result = SealedJSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    attempts = models.IntegerField(default=0)
    # Model usage: {"calls", "input_tokens", "output_tokens", "latency_ms", "cost_usd"}.
    usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["kind", "status", "-created_at"], name="jobrun_kind_status_idx"),
            models.Index(fields=["dedupe_key"], name="jobrun_dedupe_idx", condition=~models.Q(dedupe_key="")),
            # The job sweep's queries: runs still queued or running (few, among many finished).
            models.Index(
                fields=["status", "created_at"],
                name="jobrun_open_idx",
                condition=models.Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.status})"

    def encryption_owner(self) -> tuple[int | None, str]:
        return (self.agent_id, "")


class ErasureRequest(models.Model):
    """A privacy officer's request to erase (or redact) what memory holds about a person.

    Filed in the admin, run by the erasure job (governance.erasure), which leaves a report: the
    counts, the tables scanned after the cascade and what was still found in them (table, row id,
    which probe; never content). The typed legal basis and reason stay here: the audit chain gets
    the request's id, counts and the report's sha256 only.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        BLOCKED = "blocked"  # a legal hold stopped it before anything changed

    class Mode(models.TextChoices):
        ERASE = "erase", "erase (delete everything held about the person)"
        REDACT = "redact", "redact (keep places and structure, remove the words)"

    user_id = models.CharField(max_length=128)
    # Other strings that name the person (an e-mail address, a phone, a name...): the erasure redacts
    # the rows of others naming the person by them (mentions), and the leftover scan looks for them.
    identifiers = models.JSONField(default=list, blank=True)
    # The agents whose memory is erased; empty: every agent.
    agent_ids = models.JSONField(default=list, blank=True)
    # The groups of mentions (memoryapp.forgetting.mentions.GROUPS) the officer left out of the
    # erasure at its confirm step, each with its typed reason ({"file_version": "legal_obligation"}).
    excluded = models.JSONField(default=dict, blank=True)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.ERASE)
    legal_basis = models.CharField(max_length=200, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who asked, as the audit trail names staff ("staff:<username>"): kept when the user goes.
    requested_by_name = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # What the job is doing now: sampling, erasing, scanning, reporting (shown beside the progress bar).
    phase = models.CharField(max_length=20, blank=True, default="")
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(null=True, blank=True)
    job_run = models.ForeignKey(JobRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    counts = models.JSONField(default=dict, blank=True)
    # The legal holds (ids) that stopped the request, when it is blocked.
    blocked_by = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, default="")
    report = models.JSONField(null=True, blank=True)
    report_sha256 = models.CharField(max_length=64, blank=True, default="")
    # The signed receipt of the report (governance.receipts), when signing is available.
    receipt = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The admin's list (newest first) and "requests about this person".
            models.Index(fields=["-created_at"], name="erasure_created_idx"),
            models.Index(fields=["user_id", "-created_at"], name="erasure_person_idx"),
        ]

    def __str__(self) -> str:
        return f"erasure request #{self.pk} ({self.status})"


class ExportRequest(models.Model):
    """A person's request to see what memory holds about them (a data subject access request).

    Filed by a privacy officer; a job (governance.export) writes every thread, item, fact, file and
    audit record about the person, across the chosen agents, into one zip archive under EXPORT_DIR.
    The person's id lives here, never in the audit trail (which names the request by its id).
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    user_id = models.CharField("person (user id)", max_length=128)
    # Ids of the agents to look through; empty: every agent (as they are when the job runs).
    agent_ids = models.JSONField(default=list, blank=True)
    # The embeddings of the person's entries and items (vectors.jsonl): off unless asked for, as they
    # are derived from words the archive holds already and are large (governance.export).
    include_vectors = models.BooleanField("include vectors", default=False)
    requested_by = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(null=True, blank=True)
    job_run = models.ForeignKey(JobRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # The archive's file name under EXPORT_DIR ("" until done); never written to the audit trail.
    archive_name = models.CharField(max_length=200, blank=True, default="")
    archive_size = models.BigIntegerField(null=True, blank=True)
    manifest_sha256 = models.CharField(max_length=64, blank=True, default="")
    # What the archive holds, by kind (threads, entries, items, facts, ...).
    counts = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # the admin's list: newest first.
            models.Index(fields=["-created_at"], name="exportrequest_created_idx"),
        ]

    def __str__(self) -> str:
        return f"export #{self.pk} ({self.status})"


class DataKey(models.Model):
    """The register of a data key of envelope encryption (governance.crypto.envelope): one live key
    per (agent, person); `agent_id` null for rows of no agent, `user_id` "" for the agent's rows
    about no one. The key itself is in the key store (MEMORY_KEYSTORE_DIR), outside the database,
    wrapped by the master key `master_key_id`. Destroyed (crypto-shredding): its file removed and
    `destroyed_at` set; the row stays so sealed values still name what became of them."""

    id = models.CharField(max_length=40, primary_key=True)
    agent_id = models.BigIntegerField(null=True, blank=True)
    user_id = models.CharField(max_length=128, blank=True, default="")
    master_key_id = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    # Set by a rotation with new data keys (`encryption_rotate --rekey`): it still opens the rows
    # sealed under it, new rows take the owner's next key; destroyed once every row moved.
    retired_at = models.DateTimeField(null=True, blank=True)
    destroyed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # data_key_for: the one live key of an owner (a null agent is one owner too).
            models.UniqueConstraint(
                fields=["agent_id", "user_id"],
                name="datakey_owner_live_uniq",
                condition=models.Q(destroyed_at__isnull=True, retired_at__isnull=True),
                nulls_distinct=False,
            ),
        ]
        indexes = [
            # data_keys_rewrap, the startup check: live keys by master key.
            models.Index(
                fields=["master_key_id"], name="datakey_master_idx", condition=models.Q(destroyed_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return self.id
