"""The audit trail: an append-only hash chain of ids, names and outcomes (reference 002).

Appends take a transaction-level advisory lock, so concurrent transactions queue up and the
chain stays one unbroken line: each record's `prev_hash` is the `hash` of the record before,
and a transaction that rolls back takes its record with it.

A chain alone cannot see its own end cut off, nor a suffix re-hashed by someone who can write
the table. So each record is also *anchored*: once its transaction has committed, a line
`{"seq", "hash", "at"}` is appended to a file outside the database (`AUDIT_ANCHOR_FILE`), and
`audit_verify` checks the chain against those lines. What a crash can do to this:

- A line is written only after the commit (`transaction.on_commit`, dropped with a rolled-back
  savepoint), so an anchor never names a seq that was rolled back.
- Each line is one `write` with O_APPEND (appends of concurrent processes do not interleave), made
  on the committing thread before it goes on; a line torn by a crash mid-write is skipped when read.
- The line is made durable (fsync) within `AUDIT_ANCHOR_SYNC_SECONDS` (1 s by default) by a thread
  of the process, one fsync for every line of that interval, and when the process ends
  (governance.audit.anchor_file; 0: an fsync after each line, on the committing thread).
- So a crash may lose: a record committed but whose line was not yet written (the process died
  between the commit and the line); and when the machine itself goes down (power, kernel), the lines
  of the last `AUDIT_ANCHOR_SYNC_SECONDS`, written but not yet fsynced. A process killed (SIGKILL,
  out of memory) loses no line it wrote: the kernel holds it. A record whose line was lost verifies
  as a plain chain link does, and the next anchored record covers it (its hash chains through it):
  what the anchors no longer show is a cut or a rewrite of the records after the newest line kept.

Each line also names its chain and its database, so one file can hold the anchors of several
databases (DATABASE_URL pointed elsewhere, the database made anew, a backup restored, while
VAR_DIR stays):

- `chain` is the hash of the chain's first record (seq 1). A dump restored elsewhere keeps it, and
  rightly: a restored chain is the same chain and is held to its anchors (an older backup shows as
  cut off). Another database, or one made anew, has another first record, so another chain.
  Verification compares only the lines of its own chain.
- `db` is where the line was written: PostgreSQL's system identifier, the database's oid and name
  (null when the server does not tell its identifier). Lines of *this* database naming another
  chain mean its first record was rewritten (which renames the chain) or its records replaced: that
  is reported at seq 1, so renaming the chain cannot hide a rewrite from its start.
- A line without `chain` (written before lines named it) is read as the current chain's, as it was
  when written: an upgrade keeps every anchor it had. A file that such a version shared between
  databases has to be moved aside once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
from django.conf import settings
from django.db import Error, IntegrityError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg import sql
from psycopg.types.json import Jsonb

from governance import locks
from governance.audit.anchor_file import anchor_line_append
from governance.audit.pseudonyms import pseudonym_names, pseudonymize
from governance.models import AuditRecord, JobRun

logger = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64


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
    person: str = "",
    private: tuple[str, ...] = (),
) -> AuditRecord:
    """Append one record in the caller's transaction (opening one when there is none).

    `details` carry ids and counts, never content: callers pass no text of entries or items.
    `person` is the user id the record is about (the owner of its thread): it, the thread id and
    the `private` ids (more of the person's threads) are written as the person's pseudonyms
    (governance.audit.pseudonyms), wherever they appear in the record.
    """
    entry = AuditEntry(
        action=action,
        actor=actor,
        agent_id=agent_id,
        thread_id=thread_id,
        subject=subject,
        outcome=outcome,
        details=details or {},
        person=person,
        private=private,
    )
    return audit_append_many([entry])[0]


@dataclass(frozen=True)
class AuditEntry:
    """What one record says (`audit_append`'s arguments): a record still to be appended."""

    action: str
    actor: str = ""
    agent_id: int | None = None
    thread_id: str = ""
    subject: str = ""
    outcome: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # Whom it is about, and ids of theirs: written as their pseudonyms (see audit_append).
    person: str = ""
    private: tuple[str, ...] = ()

    def named(self) -> AuditEntry:
        """This entry with the person's ids replaced by their pseudonyms."""
        if not self.person:
            return self
        names = pseudonym_names(agent_id=self.agent_id, user_id=self.person, also=(self.thread_id, *self.private))
        return replace(
            self,
            thread_id=pseudonymize(self.thread_id, names=names),
            subject=pseudonymize(self.subject, names=names),
            details=pseudonymize(self.details, names=names),
            person="",
            private=(),
        )


def audit_append_many(entries: Sequence[AuditEntry]) -> list[AuditRecord]:
    """Append these records, in this order, in the caller's transaction: one lock, one read of the
    chain's end and one INSERT for all of them (a batch of the prune writes hundreds).

    Only the last is anchored: the ones before it are covered by its hash, which chains through
    theirs (what an unanchored record is, see the module's docstring).
    """
    if not entries:
        return []
    rehearsed = _rehearsal.get()
    if rehearsed is not None:  # rolled back anyway: no lock, no read of the chain's end, no write
        rehearsed.extend(entries)
        return [_unwritten(entry) for entry in entries]
    # Pseudonyms before the chain's lock: the first record about a person makes their secret.
    entries = [e.named() for e in entries]
    # No savepoint of its own (two statements a write): the records are the caller's, kept or
    # rolled back with its transaction; a failure here dooms it, as the change it audits must not
    # commit without them. A caller that goes on after a failure wraps the append in its own atomic.
    with transaction.atomic(savepoint=False):
        if len(entries) == 1:
            one = _one_record_appended(entries[0])
            if one is not None:
                head, chain = one
                transaction.on_commit(
                    lambda: anchor_append(chain=chain, seq=head.seq, hash_=head.hash, at=head.at), robust=True
                )
                return [head]
        seq, prev_hash, first_hash = _chain_end_locked()
        records: list[AuditRecord] = []
        for entry in entries:
            seq += 1
            record = _unwritten(entry)
            record.seq, record.prev_hash = seq, prev_hash
            record.hash = prev_hash = record_hash(record.prev_hash, _hashed_fields(record))
            records.append(record)
        with audit_stale_end_refused():
            if len(records) == 1:
                _record_insert(records[0])
            else:
                AuditRecord.objects.bulk_create(records)
        head = records[-1]
        seq, hash_, at = head.seq, head.hash, head.at
        chain = records[0].hash if records[0].seq == 1 else (first_hash or "")
        transaction.on_commit(lambda: anchor_append(chain=chain, seq=seq, hash_=hash_, at=at), robust=True)
        return records


_TABLE = sql.Identifier(AuditRecord._meta.db_table)
# The chain's end and its name (the first record's hash) in one read, taken under the chain's lock
# (a statement of its own: a statement that waited for the lock would read the rows of its snapshot,
# taken before the wait).
# (Rendered to text once: a composed statement is rendered again at every execute.)
_CHAIN_END = (
    sql.SQL("SELECT seq, hash, (SELECT hash FROM {table} WHERE seq = 1) FROM {table} ORDER BY seq DESC LIMIT 1")
    .format(table=_TABLE)
    .as_string(None)
)
_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_LOCK_THEN_CHAIN_END = f"{_LOCK}; {_CHAIN_END}"
_RECORD_COLUMNS = ("seq", "at", "action", "actor", "agent_id", "thread_id", "subject", "outcome", "details")
_RECORD_INSERT = (
    sql.SQL("INSERT INTO {table} ({columns}, prev_hash, hash) VALUES ({values}) RETURNING id")
    .format(
        table=_TABLE,
        columns=sql.SQL(", ").join(map(sql.Identifier, _RECORD_COLUMNS)),
        values=sql.SQL(", ").join(sql.Placeholder() for _ in range(len(_RECORD_COLUMNS) + 2)),
    )
    .as_string(None)
)


def _chain_end_locked() -> tuple[int, str, str | None]:
    """Take the chain's lock (held to the end of the transaction) and read its end: the last seq,
    its hash (0 and GENESIS_HASH for an empty chain) and the hash of the first record. Two
    statements through the cursor: the ORM's compiling of the two reads it replaced cost more than
    the reads (a write's one audit record took some 2.5 ms of CPU, bench/screening.py); sent in one
    query string where the cursor binds on the client (Django's default)."""
    with connection.cursor() as cursor:
        if isinstance(cursor.cursor, psycopg.ClientCursor):
            # Both in one query string, one round trip (a third of an audited write's, costing it
            # CPU in waits and wake-ups: bench/screening.py): the simple query protocol runs each
            # statement of a string with a snapshot of its own, the read's taken once it runs, after
            # the lock is held. (A cursor binding on the server takes one statement at a time.)
            cursor.execute(_LOCK_THEN_CHAIN_END, [locks.AUDIT_CHAIN])
            cursor.nextset()
        else:
            cursor.execute(_LOCK, [locks.AUDIT_CHAIN])
            cursor.execute(_CHAIN_END)
        row = cursor.fetchone()
    if row is None:
        return 0, GENESIS_HASH, None
    return int(row[0]), str(row[1]), row[2]


@contextmanager
def audit_stale_end_refused() -> Iterator[None]:
    """A record's INSERT that met a record of its `seq` (`_stale_end`) raised as the serialization
    failure it is; any other error as it is. Around every statement that appends records (those
    that append one in the caller's statement too: `AuditFolded`)."""
    try:
        yield
    except IntegrityError as error:
        if not _stale_end(error):
            raise
        message = "the audit chain moved on after this transaction's snapshot was taken; run it again"
        raise OperationalError(message) from psycopg.errors.SerializationFailure(message)


def _stale_end(error: IntegrityError) -> bool:
    """Whether an INSERT's integrity error is its meeting a record of its `seq`: the chain's end
    this transaction read was stale. Under READ COMMITTED it cannot be (the read after the lock has
    a snapshot of its own); under REPEATABLE READ or SERIALIZABLE (a caller's `SET TRANSACTION`) the
    transaction reads with the snapshot of its first statement, which an append committed after it
    is not in. The seq is unique, so the chain never forks: the transaction fails, and is answered
    as what it is, a serialization failure (memoryapp.retry runs such a transaction again from the
    start; elsewhere it is a 503), not a unique violation (a 500)."""
    cause = error.__cause__
    return isinstance(cause, psycopg.errors.UniqueViolation) and cause.diag.table_name == AuditRecord._meta.db_table


def _record_insert(record: AuditRecord) -> None:
    """INSERT one record (the usual append: one a write) without the ORM's save machinery; the
    details as the JSONField stores them."""
    values = [getattr(record, name) for name in _RECORD_COLUMNS]
    values[_RECORD_COLUMNS.index("details")] = Jsonb(record.details)
    with connection.cursor() as cursor:
        cursor.execute(_RECORD_INSERT, [*values, record.prev_hash, record.hash])
        record.pk = cursor.fetchone()[0]
    record._state.adding = False
    record._state.db = connection.alias


# One record in one round trip (the usual append: one a write): the chain's lock, then an INSERT that
# reads the chain's end and computes the record's hash in the database, as `record_hash` does: the
# SHA-256 of the previous hash and the canonical JSON of the hashed fields, whose only part the
# client does not know beforehand is the seq (`_hashed_parts`). It answers the chain's name too.
_ONE_RECORD_INSERT = (
    sql.SQL(
        "WITH chain_end AS (SELECT seq, hash FROM {table} ORDER BY seq DESC LIMIT 1),"
        " prev AS (SELECT COALESCE((SELECT seq FROM chain_end), 0) + 1 AS seq,"
        " COALESCE((SELECT hash FROM chain_end), %s) AS hash)"
        " INSERT INTO {table} ({columns}, prev_hash, hash)"
        " SELECT prev.seq, {values}, prev.hash,"
        " encode(sha256(convert_to(prev.hash || %s || prev.seq::text || %s, 'UTF8')), 'hex') FROM prev"
        " RETURNING id, seq, prev_hash, hash, (SELECT hash FROM {table} WHERE seq = 1)"
    )
    .format(
        table=_TABLE,
        columns=sql.SQL(", ").join(map(sql.Identifier, _RECORD_COLUMNS)),
        values=sql.SQL(", ").join(sql.Placeholder() for _ in range(len(_RECORD_COLUMNS) - 1)),
    )
    .as_string(None)
)
_LOCK_THEN_ONE_RECORD = f"{_LOCK}; {_ONE_RECORD_INSERT}"


def _hashed_parts(record: AuditRecord) -> tuple[str, str]:
    """`canonical_json(_hashed_fields(record))` as the text before its seq's digits and the text
    after them: its keys are sorted and `seq` is a top-level one, so the record's JSON is the
    object of the keys before `seq`, then `"seq":<digits>`, then the object of those after."""
    fields = _hashed_fields(record)
    del fields["seq"]
    before = {key: value for key, value in fields.items() if key < "seq"}
    after = {key: value for key, value in fields.items() if key > "seq"}
    assert before and after
    return canonical_json(before)[:-1] + ',"seq":', "," + canonical_json(after)[1:]


def _one_record_appended(entry: AuditEntry) -> tuple[AuditRecord, str] | None:
    """Append one record in one round trip (`_ONE_RECORD_INSERT`), under the chain's lock taken in
    the same query string (the simple query protocol runs each statement with a snapshot of its own:
    the INSERT's chain end is read once the lock is held). Answers the record and the chain's name;
    None where the cursor binds on the server (one statement at a time: the caller appends as usual)."""
    with connection.cursor() as cursor:
        if not isinstance(cursor.cursor, psycopg.ClientCursor):
            return None
        folded = AuditFolded(entry, named=True)
        with audit_stale_end_refused():
            cursor.execute(folded.sql, folded.params)
        return folded.read(cursor, anchored=False), folded.chain


class AuditFolded:
    """One record appended by statements the caller sends after its own in one query string (a write
    whose statement is a round trip anyway: the screening decisions of an append,
    memoryapp.threads.services `_entries_write`): `sql` (the chain's lock, then the INSERT of
    `_ONE_RECORD_INSERT`) and `params` to append to the caller's (its execute within
    `audit_stale_end_refused`); once it ran, `read(cursor)` with the cursor moved past the caller's
    results (`nextset`). The record is anchored after the commit as
    `audit_append` anchors it. Only for a cursor that binds on the client (`audit_folded`)."""

    sql = _LOCK_THEN_ONE_RECORD

    def __init__(self, entry: AuditEntry, *, named: bool = False) -> None:
        """`named`: the entry's person already written as pseudonyms (`AuditEntry.named`)."""
        entry = entry if named else entry.named()
        self.record = _unwritten(entry)
        self.record.seq = 0
        before, after = _hashed_parts(self.record)
        values = [getattr(self.record, name) for name in _RECORD_COLUMNS[1:]]
        values[_RECORD_COLUMNS.index("details") - 1] = Jsonb(self.record.details)
        self.params = [locks.AUDIT_CHAIN, GENESIS_HASH, *values, before, after]
        self.chain = ""

    def read(self, cursor: Any, *, anchored: bool = True) -> AuditRecord:
        """The record as the INSERT stored it, read with the cursor on the lock's result (the caller
        moved past its own statements' results). `anchored`: its anchor line is appended after the
        commit here."""
        cursor.nextset()
        pk, seq, prev_hash, hash_, first_hash = cursor.fetchone()
        record = self.record
        record.pk, record.seq, record.prev_hash, record.hash = pk, int(seq), str(prev_hash), str(hash_)
        record._state.adding = False
        record._state.db = connection.alias
        self.chain = chain = record.hash if record.seq == 1 else (first_hash or "")
        if anchored:
            seq, hash_, at = record.seq, record.hash, record.at
            transaction.on_commit(lambda: anchor_append(chain=chain, seq=seq, hash_=hash_, at=at), robust=True)
        return record


def audit_folded(cursor: Any, entry: AuditEntry) -> AuditFolded | None:
    """The record to append by the caller's statement on `cursor` (`AuditFolded`); None where it
    cannot be: in a rehearsal (nothing is written), or on a cursor that binds on the server (one
    statement a query): the caller then appends it with `audit_append`."""
    if _rehearsal.get() is not None or not isinstance(getattr(cursor, "cursor", cursor), psycopg.ClientCursor):
        return None
    return AuditFolded(entry)


# The appends of the rehearsal under way in this thread (None: appends are written).
_rehearsal: ContextVar[list[AuditEntry] | None] = ContextVar("audit_rehearsal", default=None)


@contextmanager
def audit_rehearsal() -> Iterator[list[AuditEntry]]:
    """A transaction that is always rolled back, in which appends are collected (the list yielded)
    instead of written: no chain lock is taken, so the service's other audit writes do not wait for
    it. What runs inside may fail freely; nothing of it, audit included, is kept.

    The list is a tally of what was appended, not a chain: an append inside a savepoint that is
    rolled back within the rehearsal stays in it, unless the caller drops it (as the consequences
    preview does for a refused step)."""
    collected: list[AuditEntry] = []
    token = _rehearsal.set(collected)
    try:
        with transaction.atomic():
            yield collected
            transaction.set_rollback(True)
    finally:
        _rehearsal.reset(token)


def _unwritten(entry: AuditEntry) -> AuditRecord:
    """The record an entry becomes before its place in the chain (no seq, no hash): its texts cut to
    their columns, its details as the canonical JSON hashed reads them. What a rehearsal's append
    returns, and what the appends number and hash."""
    return AuditRecord(
        at=timezone.now(),
        action=entry.action,
        actor=entry.actor[:200],
        agent_id=entry.agent_id,
        thread_id=entry.thread_id,
        subject=entry.subject[:300],
        outcome=entry.outcome[:100],
        details=json.loads(canonical_json(entry.details)),
    )


def _first_record_hash() -> str | None:
    """The chain's name: the hash of its first record (None while it has none)."""
    return AuditRecord.objects.filter(seq=1).values_list("hash", flat=True).first()


def database_identity() -> str | None:
    """`<system identifier>:<database oid>:<name>`: which database of which PostgreSQL cluster this
    is. A database made anew has another oid, a cluster made anew another identifier. None when the
    server does not tell its identifier (then no line is taken for this database's)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT system_identifier FROM pg_control_system()), d.oid, d.datname"
                "  FROM pg_database AS d WHERE d.datname = current_database()"
            )
            row = cursor.fetchone()
    except Error:  # not permitted on this server, or the connection is gone: the line is still written
        logger.warning("the database's system identifier cannot be read: anchors name no database")
        return None
    if row is None or row[0] is None:
        return None
    return f"{row[0]}:{row[1]}:{row[2]}"


# What `database_identity` answered, by the open database connection it was asked on: it cannot
# change while that connection lives (a new connection asks again).
_identities: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _database_identity_of_connection() -> str | None:
    """`database_identity`, read once per database connection (every anchor line names it: a query
    and a transaction after each committed write before)."""
    raw = connection.connection
    known = _identities.get(raw) if raw is not None else None
    if known is not None:
        return known
    identity = database_identity()
    raw = connection.connection  # the query opened it when there was none
    if identity is not None and raw is not None:
        _identities[raw] = identity
    return identity


# --- anchors: the chain's head, outside the database ---------------------------------------------


def anchor_path() -> Path:
    return Path(settings.AUDIT_ANCHOR_FILE)


def anchor_append(*, chain: str, seq: int, hash_: str, at: datetime) -> None:
    """Append one anchor line (after the record's commit): written now, fsynced within
    AUDIT_ANCHOR_SYNC_SECONDS (governance.audit.anchor_file). A failure is logged, never raised:
    the change it records is committed, and an unanchored record still verifies as a chain link."""
    anchor = {
        "chain": chain,
        "db": _database_identity_of_connection(),
        "seq": seq,
        "hash": hash_,
        "at": at.isoformat(timespec="microseconds"),
    }
    path = anchor_path()
    try:
        anchor_line_append(path, (json.dumps(anchor) + "\n").encode(), sync_seconds=settings.AUDIT_ANCHOR_SYNC_SECONDS)
    except OSError:
        logger.exception("could not anchor audit record %s in %s", seq, path)


@dataclass(frozen=True)
class Anchor:
    chain: str | None  # None: a line of the older format, read as the current chain's
    db: str | None
    seq: int
    hash: str


def anchors_read(*, tail_bytes: int | None = None) -> list[Anchor]:
    """Every anchor line of the file; torn or foreign lines are skipped.

    With `tail_bytes`, only the anchors in that many bytes at the file's end (the newest).
    """
    anchors: list[Anchor] = []
    try:
        with anchor_path().open("rb") as raw:
            if tail_bytes is not None:
                size = raw.seek(0, os.SEEK_END)
                raw.seek(max(0, size - tail_bytes))
                if raw.tell() > 0:
                    raw.readline()  # the first line read from the middle is a piece of one
            for raw_line in raw:
                line = raw_line.decode("utf-8", errors="replace")
                try:
                    anchor = json.loads(line)
                    seq, hash_ = anchor["seq"], anchor["hash"]
                    chain, db = anchor.get("chain"), anchor.get("db")
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue
                if (
                    isinstance(seq, int)
                    and not isinstance(seq, bool)
                    and isinstance(hash_, str)
                    and isinstance(chain, str | None)
                    and isinstance(db, str | None)
                ):
                    anchors.append(Anchor(chain=chain, db=db, seq=seq, hash=hash_))
    except FileNotFoundError:
        pass
    return anchors


@dataclass(frozen=True)
class AuditVerification:
    records: int
    ok: bool
    first_broken: int | None
    anchors: int = 0
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "ok": self.ok,
            "first_broken": self.first_broken,
            "anchors": self.anchors,
            "reason": self.reason,
        }


def _chain_anchors(lines: list[Anchor]) -> tuple[dict[int, set[str]], bool]:
    """The anchored hashes of this chain by seq (lines without a chain name count as its own), and
    whether this database anchored another chain (its records rewritten from seq 1, or replaced)."""
    chain = _first_record_hash()
    here = database_identity()
    anchors: dict[int, set[str]] = {}
    replaced = False
    for line in lines:
        if line.chain is None or line.chain == chain:
            anchors.setdefault(line.seq, set()).add(line.hash)
        elif here is not None and line.db == here:
            replaced = True
    return anchors, replaced


def audit_verify() -> AuditVerification:
    """Check the chain, and the chain against its anchors; name the first seq that does not hold.

    1. Take the anchor lines of this chain (named by its first record's hash; lines without a name
       count as its own). Lines that this database wrote for another chain: its first record was
       rewritten or its records replaced, broken at seq 1.
    2. Walk the records oldest first: each must have the next seq, link to the hash before and
       hash to its own `hash` (a record changed, deleted or inserted in the middle).
    3. A record whose anchor names another hash: the suffix from there was rewritten, however
       consistently (its own links all hold).
    4. Anchors past the chain's last record: the newest records were cut off; the first missing
       seq is named.
    """
    anchors, replaced = _chain_anchors(anchors_read())
    prev_hash = GENESIS_HASH
    expected_seq = 1
    checked = 0

    def broken(seq: int, reason: str) -> AuditVerification:
        return AuditVerification(records=checked, ok=False, first_broken=seq, anchors=len(anchors), reason=reason)

    if replaced:
        return broken(
            1,
            "this database anchored a chain whose first record is not this one (the chain was rewritten "
            "from its start, or its records replaced)",
        )

    for record in AuditRecord.objects.order_by("seq").iterator(chunk_size=2000):
        checked += 1
        if (
            record.seq != expected_seq
            or record.prev_hash != prev_hash
            or record.hash != record_hash(record.prev_hash, _hashed_fields(record))
        ):
            return broken(record.seq, "the record does not follow the chain (changed, or one before it is missing)")
        anchored = anchors.get(record.seq)
        if anchored is not None and anchored != {record.hash}:
            return broken(record.seq, "the record's hash differs from its anchor (the chain was rewritten from here)")
        prev_hash = record.hash
        expected_seq += 1
    newest_anchor = max(anchors, default=0)
    if newest_anchor >= expected_seq:
        return broken(
            expected_seq, f"records up to seq {newest_anchor} were anchored, the chain ends at seq {expected_seq - 1}"
        )
    return AuditVerification(records=checked, ok=True, first_broken=None, anchors=len(anchors))


def audit_verify_tail(*, records: int = 500) -> AuditVerification:
    """The cheap check of the chain's newest `records` (for a page that loads often): each links to
    the one before and hashes to its own `hash`, their anchors (from the anchor file's end) agree,
    and no anchor names a seq past the chain's end. `audit_verify` is the whole check."""
    newest = list(AuditRecord.objects.order_by("-seq")[:records])
    newest.reverse()
    anchors, replaced = _chain_anchors(anchors_read(tail_bytes=records * 300))
    if replaced:
        return AuditVerification(
            records=0,
            ok=False,
            first_broken=1,
            anchors=len(anchors),
            reason="this database anchored a chain whose first record is not this one",
        )
    checked = 0
    previous: AuditRecord | None = None
    for record in newest:
        checked += 1
        linked = previous is None or (record.seq == previous.seq + 1 and record.prev_hash == previous.hash)
        if not linked or record.hash != record_hash(record.prev_hash, _hashed_fields(record)):
            return AuditVerification(
                records=checked,
                ok=False,
                first_broken=record.seq,
                anchors=len(anchors),
                reason="the record does not follow the chain (changed, or one before it is missing)",
            )
        anchored = anchors.get(record.seq)
        if anchored is not None and anchored != {record.hash}:
            return AuditVerification(
                records=checked,
                ok=False,
                first_broken=record.seq,
                anchors=len(anchors),
                reason="the record's hash differs from its anchor (the chain was rewritten from here)",
            )
        previous = record
    last_seq = previous.seq if previous else 0
    newest_anchor = max(anchors, default=0)
    if newest_anchor > last_seq:
        return AuditVerification(
            records=checked,
            ok=False,
            first_broken=last_seq + 1,
            anchors=len(anchors),
            reason=f"records up to seq {newest_anchor} were anchored, the chain ends at seq {last_seq}",
        )
    return AuditVerification(records=checked, ok=True, first_broken=None, anchors=len(anchors))


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


# The kind of the verification job runs (governance.tasks: the daily schedule, the admin's button).
AUDIT_VERIFY_KIND = "audit_verify"


def audit_verification_latest() -> dict[str, Any] | None:
    """The newest finished verification run of the whole chain: {ok, first_broken, reason, records,
    at, run_id}; None when none has run. /readyz and the admin index show it."""
    run = (
        JobRun.objects.filter(kind=AUDIT_VERIFY_KIND, status__in=[JobRun.Status.SUCCEEDED, JobRun.Status.FAILED])
        .order_by("-finished_at", "-pk")
        .only("pk", "status", "result", "error", "finished_at")
        .first()
    )
    if run is None:
        return None
    result = run.result or {}
    if run.status == JobRun.Status.FAILED:
        # The verification itself did not run through: that is no proof of a whole chain.
        return {
            "ok": False,
            "first_broken": None,
            "reason": f"the verification failed: {run.error[:200]}",
            "records": None,
            "at": run.finished_at,
            "run_id": run.pk,
        }
    return {
        "ok": bool(result.get("ok")),
        "first_broken": result.get("first_broken"),
        "reason": result.get("reason") or "",
        "records": result.get("records"),
        "at": run.finished_at,
        "run_id": run.pk,
    }
