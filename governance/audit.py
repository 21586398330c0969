"""The audit trail: an append-only hash chain of ids, names and outcomes (reference 002).

Appends take a transaction-level advisory lock, so concurrent transactions queue up and the
chain stays one unbroken line: each record's `prev_hash` is the `hash` of the record before,
and a transaction that rolls back takes its record with it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from governance.models import AuditRecord

GENESIS_HASH = "0" * 64
_AUDIT_LOCK_KEY = 0x4D454D41  # "MEMA": the advisory lock of the audit chain


def canonical_json(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def record_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return hashlib.sha256((prev_hash + canonical_json(fields)).encode()).hexdigest()


def _hashed_fields(record: AuditRecord) -> dict[str, Any]:
    at: datetime = record.at
    return {
        "seq": record.seq,
        "at": at.isoformat(timespec="microseconds"),
        "action": record.action,
        "actor": record.actor,
        "agent_id": record.agent_id,
        "thread_id": record.thread_id,
        "subject": record.subject,
        "outcome": record.outcome,
        "details": record.details,
    }


def audit_append(
    *,
    action: str,
    actor: str = "",
    agent_id: int | None = None,
    thread_id: str = "",
    subject: str = "",
    outcome: str = "",
    details: dict[str, Any] | None = None,
) -> AuditRecord:
    """Append one record in the caller's transaction (opening one when there is none).

    `details` carry ids and counts, never content: callers pass no text of entries or items.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_AUDIT_LOCK_KEY])
        last = AuditRecord.objects.order_by("-seq").only("seq", "hash").first()
        record = AuditRecord(
            seq=(last.seq + 1) if last else 1,
            at=timezone.now(),
            action=action,
            actor=actor[:200],
            agent_id=agent_id,
            thread_id=thread_id,
            subject=subject[:300],
            outcome=outcome[:100],
            details=json.loads(canonical_json(details or {})),
            prev_hash=last.hash if last else GENESIS_HASH,
        )
        record.hash = record_hash(record.prev_hash, _hashed_fields(record))
        record.save(force_insert=True)
        return record


@dataclass(frozen=True)
class AuditVerification:
    records: int
    ok: bool
    first_broken: int | None

    def as_dict(self) -> dict[str, Any]:
        return {"records": self.records, "ok": self.ok, "first_broken": self.first_broken}


def audit_verify() -> AuditVerification:
    """Walk the chain oldest first; the first record whose seq, link or hash does not hold breaks it."""
    prev_hash = GENESIS_HASH
    expected_seq = 1
    checked = 0
    for record in AuditRecord.objects.order_by("seq").iterator(chunk_size=2000):
        checked += 1
        if (
            record.seq != expected_seq
            or record.prev_hash != prev_hash
            or record.hash != record_hash(record.prev_hash, _hashed_fields(record))
        ):
            return AuditVerification(records=checked, ok=False, first_broken=record.seq)
        prev_hash = record.hash
        expected_seq += 1
    return AuditVerification(records=checked, ok=True, first_broken=None)


def audit_records(
    *, thread_id: str | None = None, action: str | None = None, after_seq: int | None = None, limit: int = 100
) -> list[AuditRecord]:
    qs = AuditRecord.objects.order_by("seq")
    if thread_id:
        qs = qs.filter(thread_id=thread_id)
    if action:
        qs = qs.filter(action=action)
    if after_seq is not None:
        qs = qs.filter(seq__gt=after_seq)
    return list(qs[:limit])
