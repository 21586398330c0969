"""What an irreversible action takes with it, counted before it is done and reported after.

A staff page that deletes or redacts first shows what goes (entries, replies moved, fork copies,
items purged or trimmed, quotes, file versions, summaries, entities), then asks to confirm. The
preview must equal the outcome, so it is not a second count that could drift from the cascade: the
real services run, inside a transaction that is then rolled back.

1. Run the actions, each in a savepoint: one refused (e.g. an event entry that cannot be redacted)
   is listed as skipped and the others still run.
2. Count the audit records this run appended, of this actor: every cascade records its ids and
   counts there (`thread.delete`, `entry.delete`, `entry.redact`, `lineage.forget`,
   `item.forgotten`), in the same transaction as the change.
3. Preview: the actions run in an audit rehearsal (`audit_rehearsal`), rolled back, whose records
   are tallied, not written: no chain lock is held through the preview, no job sent. Outcome:
   commit, and count the records written after the newest seq noted before (the same counts).

A lock conflict (deadlock victim) runs the whole batch again, as the cascades themselves do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Max

from governance.audit.chain import AuditEntry, audit_rehearsal
from governance.models import AuditRecord
from memoryapp.errors import DomainError
from memoryapp.retry import atomic_retrying

# Each step is (the id shown when it is skipped, the call).
Step = tuple[str, Callable[[], Any]]

# The kinds counted, in the order a page lists them, with their labels (singular, plural).
KINDS: tuple[tuple[str, str, str], ...] = (
    ("threads_deleted", "thread deleted", "threads deleted"),
    ("entries_deleted", "entry deleted", "entries deleted"),
    ("entries_redacted", "entry redacted", "entries redacted"),
    ("replies_moved", "reply moved to the parent", "replies moved to the parent"),
    ("fork_copies_deleted", "fork copy deleted", "fork copies deleted"),
    ("fork_copies_redacted", "fork copy redacted", "fork copies redacted"),
    ("items_purged", "memory item purged", "memory items purged"),
    ("items_trimmed", "memory item trimmed (loses quotes)", "memory items trimmed (lose quotes)"),
    ("evidence_removed", "quote removed", "quotes removed"),
    ("file_versions_redacted", "memory file version redacted", "memory file versions redacted"),
    ("summaries_removed", "compaction summary removed", "compaction summaries removed"),
    ("entities_deleted", "entity deleted", "entities deleted"),
    ("items_let_go", "memory item let go (history kept)", "memory items let go (history kept)"),
)
_LINEAGE = (
    "items_purged",
    "items_trimmed",
    "evidence_removed",
    "file_versions_redacted",
    "summaries_removed",
    "entities_deleted",
)


@dataclass
class Consequences:
    """What a batch of deletes or redactions took (or would take), from its audit records."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((k for k, _, _ in KINDS), 0))
    # Forks whose copies of the entries go or are redacted too: (agent id, thread external id).
    forks: set[tuple[int | None, str]] = field(default_factory=set)
    purged_item_ids: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (id, why)
    audit_records: int = 0

    def rows(self) -> list[tuple[str, int]]:
        """(label, count) of every kind, the zeros too: a preview says what does *not* go as well."""
        rows = [(plural if self.counts[key] != 1 else singular, self.counts[key]) for key, singular, plural in KINDS]
        rows.append(("fork touched" if len(self.forks) == 1 else "forks touched", len(self.forks)))
        return [row for row in rows if row[1]] + [row for row in rows if not row[1]]  # what goes first

    def summary(self) -> str:
        """One line of what was taken, non-zero kinds only: for the message after the action."""
        parts = [f"{count} {label}" for label, count in self.rows() if count]
        return ", ".join(parts) if parts else "nothing"

    def add(self, record: AuditRecord | AuditEntry) -> None:
        details = record.details if isinstance(record.details, dict) else {}
        count = self.counts
        self.audit_records += 1
        if record.action == "thread.delete":
            count["threads_deleted"] += 1
            count["entries_deleted"] += _int(details.get("entries"))
        elif record.action in ("entry.delete", "entry.redact"):
            # One record per thread a cascade changed (memoryapp.forgetting.services `_audit_entries`).
            count["replies_moved"] += _int(details.get("children_respliced"))
            if details.get("fork"):
                count["fork_copies_deleted"] += _int(details.get("deleted"))
                count["fork_copies_redacted"] += _int(details.get("redacted"))
                self.forks.add((record.agent_id, record.thread_id))
            else:
                count["entries_deleted"] += _int(details.get("deleted"))
                count["entries_redacted"] += _int(details.get("redacted"))
        elif record.action == "item.forgotten":
            count["items_let_go"] += 1
        elif record.action == "lineage.forget":
            for key in _LINEAGE:
                count[key] += _int(details.get(key))
            ids = details.get("purged_item_ids")
            if isinstance(ids, list):
                self.purged_item_ids.extend(str(i) for i in ids)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _steps_run(steps: Sequence[Step], report: Consequences, appended: list[AuditEntry] | None = None) -> None:
    for shown_id, call in steps:
        tallied = len(appended) if appended is not None else 0
        try:
            with transaction.atomic():  # a savepoint: a refused step leaves the others standing
                call()
        except DomainError as exc:
            report.skipped.append((shown_id, exc.message))
            if appended is not None:
                del appended[tallied:]  # its records went with its savepoint


def _apply(steps: Sequence[Step], *, actor: str) -> Consequences:
    report = Consequences()
    before = AuditRecord.objects.aggregate(seq=Max("seq"))["seq"] or 0
    _steps_run(steps, report)
    # Only this run's records: every audited write of this run carries its actor, and the records
    # of other transactions committed meanwhile (another actor's) are left out by it.
    for record in AuditRecord.objects.filter(seq__gt=before, actor=actor).order_by("seq"):
        report.add(record)
    return report


def _preview(steps: Sequence[Step], *, actor: str) -> Consequences:
    """The steps in an audit rehearsal: rolled back, their records tallied without the chain's lock
    (the service's other audit writes do not wait for a preview)."""
    report = Consequences()
    with audit_rehearsal() as appended:
        _steps_run(steps, report, appended)
    for entry in appended:
        if entry.actor == actor:  # as the outcome counts: this run's records only
            report.add(entry)
    return report


def consequences_preview(*, steps: Sequence[Step], actor: str) -> Consequences:
    """Run the steps, count what they took, and roll everything back: nothing is changed."""
    return atomic_retrying(_preview)(steps, actor=actor)


def consequences_apply(*, steps: Sequence[Step], actor: str) -> Consequences:
    """Run the steps in one transaction (all, or none when one fails for another reason than a
    refusal) and report what they took: the same counts their preview showed."""
    return atomic_retrying(_apply)(steps, actor=actor)
