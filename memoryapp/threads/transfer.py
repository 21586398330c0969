"""A thread as JSONL, in the record format of 000's session store (format version 2, see `formats`).

Every line is one record:

    {"type": "thread", "format": 2, "thread": {"id", "user_id", "metadata", "created_at", "forked_from",
                                               "memory", "memory_off"}}                          (first; ours)
    {"type": "node", "node": {"id", "parent", "turn", "createdAt", ...}}                        (one per entry, seq order)
    {"type": "head", "leaf": "<entry id>"}                                                       (last: the active leaf)

A node carries 000's fields (`id`, `parent`, `turn` = {role, content, toolCalls?, toolCallId?},
`createdAt` in epoch milliseconds) and ours beside them: `seq`, `entryType`, `toolName`,
`senderName`, `tokenCount`, `event`, `metadata`, `hash` (the content hash), `createdAtIso`
(microseconds, so a round trip is exact) and `redactedAt`. As in 000, the last head wins;
records of other types are skipped. An import reads files of every earlier format, each record
brought to the current one by the chain of migrators (`formats.records_upgraded`), and refuses a
newer format with a 400 naming the line that declares it. `memory` / `memory_off` are the thread's
memory switch and the seq ranges written while it was off (they stay out of extraction after an
import too).

`hash` is 000's hashNode over the entry as stored: the first 32 hex digits of SHA-256 over
JSON({"parent", "turn", "createdAt"}) with sorted keys and no spaces, where this `turn` is the
node's `turn` plus `type` (= `entryType`) and, for an event, `event`. Keys are sorted because
PostgreSQL's JSONB keeps its own key order, and the hash must come out the same when computed
again from a stored entry (memoryapp.threads.hashing.content_hash).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from governance.audit.chain import audit_append
from memoryapp.errors import DomainError
from memoryapp.events.services import event_record
from memoryapp.ids import entry_id_check, entry_id_imported, person_id_check, thread_id_check
from memoryapp.models import Agent, Entry, SubjectMention, Thread
from memoryapp.models.people import MESSAGE_USER_KEY
from memoryapp.screening.screen import screener_for
from memoryapp.storable import json_text_may_hold_unstorable, storable_text_check, time_in_range
from memoryapp.subjects.detect import mentions_record, thread_key_people_set
from memoryapp.subjects.erasing import participants_erasing_refuse, senders_erasing_refuse
from memoryapp.threads.formats import FORMAT_VERSION, records_upgraded
from memoryapp.threads.hooks import after_entries_added
from memoryapp.threads.memory_switch import OFF_RANGES_KEY, memory_off_ranges
from memoryapp.threads.redaction import redaction_apply
from memoryapp.threads.screened import entries_screened
from memoryapp.threads.selectors import thread_entries_iter
from memoryapp.threads.services import PARTICIPANTS_FIELD, entries_sealed_for_people
from memoryapp.threads.validation import (
    EVENT_TYPE_VALUES,
    entry_from_spec,
    thread_id_or_new,
    thread_metadata_check,
)

MAX_IMPORT_LINES = 200_000
MAX_SEQ = 2**62


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def node_record(entry: Entry) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": entry.role, "content": entry.content}
    if entry.tool_calls:
        turn["toolCalls"] = entry.tool_calls
    if entry.tool_call_id:
        turn["toolCallId"] = entry.tool_call_id
    node: dict[str, Any] = {
        "id": entry.id,
        "parent": entry.parent_id,
        "turn": turn,
        "createdAt": int(entry.created_at.timestamp() * 1000),
        "createdAtIso": entry.created_at.isoformat(),
        "seq": entry.seq,
        "entryType": entry.type,
        "tokenCount": entry.token_count,
        "metadata": entry.metadata or {},
        "hash": entry.content_hash,
    }
    if entry.tool_name:
        node["toolName"] = entry.tool_name
    if entry.sender_name:
        node["senderName"] = entry.sender_name
    if entry.event is not None:
        node["event"] = entry.event
    if entry.redacted_at is not None:
        node["redactedAt"] = entry.redacted_at.isoformat()
    return {"type": "node", "node": node}


def thread_record(thread: Thread) -> dict[str, Any]:
    """The first record of a thread's JSONL: its id, person, metadata, fork origin and memory switch."""
    forked_from = thread.forked_from.external_id if thread.forked_from_id and thread.forked_from else None
    return {
        "type": "thread",
        "format": FORMAT_VERSION,
        "thread": {
            "id": thread.external_id,
            "user_id": thread.user_id,
            "metadata": thread.metadata or {},
            "created_at": thread.created_at.isoformat(),
            "forked_from": forked_from,
            "memory": "on" if thread.memory_enabled else "off",
            "memory_off": memory_off_ranges(thread),
        },
    }


def thread_export_lines(*, thread: Thread, entries: Iterable[Entry] | None = None) -> Iterator[str]:
    """The thread's records, one JSON document per line (no newline at the ends).

    The entries are read as they are written out (a server-side cursor), never all at once; a
    caller exporting many threads may pass their `entries` (in seq order) from a stream of its own.
    """
    yield _dumps(thread_record(thread))
    for entry in thread_entries_iter(thread=thread) if entries is None else entries:
        yield _dumps(node_record(entry))
    if thread.active_leaf_id:
        yield _dumps({"type": "head", "leaf": thread.active_leaf_id})


def _time(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        if isinstance(value, str):
            at = datetime.fromisoformat(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            at = datetime.fromtimestamp(value / 1000, tz=UTC)
        else:
            raise ValueError(value)
    except (ValueError, OverflowError, OSError) as exc:
        raise DomainError("invalid_value", f"{field} is not a time.", field=field) from exc
    return time_in_range(at if at.tzinfo else at.replace(tzinfo=UTC), field=field)


def _node_spec(node: Any, line: int) -> dict[str, Any]:
    """The entry fields of one node record of the current format (checked further by the import
    service); an older file's node was brought to it by the migrators (`formats`)."""
    where = f"line {line}"
    if not isinstance(node, dict):
        raise DomainError("invalid_record", "A node record needs a `node` object.", field=where)
    turn = node.get("turn") or {}
    if not isinstance(turn, dict):
        raise DomainError("invalid_record", "A node's turn must be an object.", field=f"{where}.turn")
    metadata = node.get("metadata") if "metadata" in node else {}
    seq = node.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise DomainError("invalid_value", "A node needs a positive integer seq.", field=f"{where}.seq")
    if seq > MAX_SEQ:
        # The column is a bigint, and the thread's next seq follows the largest one.
        raise DomainError("invalid_value", f"A node's seq is at most {MAX_SEQ}.", field=f"{where}.seq")
    return {
        # Checked here to name the line; the import service checks it again for other callers.
        "id": entry_id_check(node.get("id"), field=f"{where}.id"),
        "parent_id": node.get("parent"),
        "seq": seq,
        "type": node.get("entryType") or "message",
        "role": turn.get("role") or "",
        "content": turn.get("content"),
        "tool_calls": turn.get("toolCalls"),
        "tool_call_id": turn.get("toolCallId") or "",
        "tool_name": node.get("toolName") or "",
        "sender_name": node.get("senderName") or "",
        "token_count": node.get("tokenCount"),
        "event": node.get("event"),
        "metadata": metadata,
        "created_at": _time(node.get("createdAtIso") or node.get("createdAt"), f"{where}.createdAt"),
        "redacted_at": _time(node.get("redactedAt"), f"{where}.redactedAt"),
    }


def thread_import_lines(
    *, agent: Agent, lines: Iterable[str], external_id: str | None = None, actor: str = ""
) -> Thread:
    """A new thread of `agent` from JSONL lines (`external_id` overrides the file's own id).

    1. Every line is read as a JSON record (malformed: a 400 naming the line).
    2. The file's format is read from its thread record; a newer one than FORMAT_VERSION is
       refused; each record goes through the migrators from that format on (`formats`).
    3. The records of the current format make the thread (`thread_import`).
    Nothing is written unless every line is good.
    """
    header: dict[str, Any] = {}
    header_line = 0
    nodes: list[dict[str, Any]] = []
    leaf: str | None = None
    records: list[tuple[int, dict[str, Any]]] = []
    for number, raw in enumerate(lines, start=1):
        if number > MAX_IMPORT_LINES:
            raise DomainError(
                "import_too_large", f"An import holds at most {MAX_IMPORT_LINES} lines.", field="body", status=413
            )
        text = raw.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise DomainError("malformed_jsonl", f"Line {number} is not JSON.", field=f"line {number}") from exc
        if json_text_may_hold_unstorable(text):
            storable_text_check(record, field=f"line {number}")
        if not isinstance(record, dict):
            raise DomainError("invalid_record", f"Line {number} is not a record.", field=f"line {number}")
        records.append((number, record))
    _, current = records_upgraded(records)
    for number, record in current:
        kind = record.get("type")
        if kind == "thread" and isinstance(record.get("thread"), dict):
            if not header:
                header, header_line = record["thread"], number
        elif kind == "node":
            nodes.append(_node_spec(record.get("node"), number))
        elif kind == "head":
            leaf = record.get("leaf")
            if leaf is not None and not isinstance(leaf, str):
                raise DomainError("invalid_record", "A head names its leaf by id.", field=f"line {number}")
    thread_id = external_id or header.get("id")
    if not external_id and isinstance(thread_id, str) and thread_id:
        # The file's own id: an error names its line (an `external_id` given is checked as `id`).
        thread_id_check(thread_id, field=f"line {header_line}.thread.id")
    metadata = header.get("metadata") if isinstance(header.get("metadata"), dict) else {}
    raw_user = header.get("user_id")
    user_id = raw_user if isinstance(raw_user, str) else ""
    memory_enabled, memory_off = _memory_switch(header, header_line) if header else (True, [])
    return thread_import(
        agent=agent,
        external_id=thread_id if isinstance(thread_id, str) else None,
        user_id=user_id,
        metadata=metadata,
        nodes=nodes,
        leaf_id=leaf,
        actor=actor,
        created_at=_time(header.get("created_at"), "thread.created_at"),
        memory_enabled=memory_enabled,
        memory_off=memory_off,
    )


def _is_seq(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SEQ


def _memory_switch(header: dict[str, Any], line: int) -> tuple[bool, list[dict[str, Any]]]:
    """The thread record's memory switch and off ranges, checked (an error names the line)."""
    memory = header.get("memory", "on")
    if memory not in ("on", "off"):
        raise DomainError("invalid_value", 'memory must be "on" or "off".', field=f"line {line}.thread.memory")
    raw = header.get("memory_off") or []
    where = f"line {line}.thread.memory_off"
    if not isinstance(raw, list):
        raise DomainError("invalid_type", "memory_off must be a list of seq ranges.", field=where)
    ranges: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        start = item.get("from_seq") if isinstance(item, dict) else None
        end = item.get("to_seq") if isinstance(item, dict) else None
        open_end = end is None and memory == "off" and index == len(raw) - 1
        if not (_is_seq(start) and (open_end or (_is_seq(end) and end >= start))):  # type: ignore[operator]
            raise DomainError(
                "invalid_value", "Each range is {from_seq, to_seq} with to_seq >= from_seq.", field=f"{where}[{index}]"
            )
        ranges.append({"from_seq": start, "to_seq": end})
    return memory == "on", ranges


def _import_redacted(entry: Entry, redacted_at: Any, *, field: str) -> None:
    """An entry the file says was redacted is stored redacted: a file that marks an entry so while
    keeping its words (hand-made, or edited) must not bring them back. Its own record of the
    redaction (`metadata.redacted`: at, reason) is kept, or one is written."""
    if not isinstance(redacted_at, datetime):
        raise DomainError("invalid_type", "redacted_at must be a date-time.", field=field)
    if entry.type in EVENT_TYPE_VALUES:
        raise DomainError("not_redactable", "Event entries cannot be redacted.", field=field)
    if timezone.is_naive(redacted_at):
        redacted_at = timezone.make_aware(redacted_at, UTC)
    record = (entry.metadata or {}).get("redacted")
    if not isinstance(record, dict):
        record = {"at": redacted_at.isoformat(), "reason": ""}
    redaction_apply(entry, at=redacted_at, record=record)


@transaction.atomic
def thread_import(
    *,
    agent: Agent,
    external_id: str | None,
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    nodes: list[dict[str, Any]],
    leaf_id: str | None,
    actor: str = "",
    created_at: datetime | None = None,
    memory_enabled: bool = True,
    memory_off: list[dict[str, Any]] | None = None,
) -> Thread:
    """Create a thread from exported entries, keeping their parents, seq, times and metadata (and the
    thread's own `created_at`, its memory switch and off ranges when the file gives them), and their
    ids when the service made them for this agent; any other id is stored under one derived from it
    and the agent (`memoryapp.ids.entry_id_imported`: the same for every import of the file).

    1. Refuse an existing thread id (409 `thread_exists`) or an id of the agent's entries (409
       `entry_exists`); another agent's entries are never in the way.
    2. Check each node: fields as `entry_add` checks them; seq unique and positive; its parent
       a node of the file with a smaller seq (so the tree has no cycle); the leaf one of them;
       a node marked redacted is stored as a redaction leaves an entry (`_import_redacted`).
    3. Insert all in one statement; the thread's next_seq follows the largest seq; audit.
    """
    external_id = thread_id_or_new(external_id, field="id")
    metadata = thread_metadata_check({} if metadata is None else metadata)
    screener = screener_for(agent=agent)
    if screener is not None:
        metadata = screener.value(metadata, field="metadata", holdable=False)
    thread = _import_thread_create(
        agent=agent,
        external_id=external_id,
        user_id=user_id,
        metadata=metadata,
        created_at=created_at,
        memory_enabled=memory_enabled,
        memory_off=memory_off,
    )
    if thread.user_id:
        # A thread made about a person being erased is refused, as `thread_create` refuses it (her
        # erasure's step for her threads may be past: memoryapp.subjects.erasing, step 5).
        senders_erasing_refuse(agent_id=agent.pk, senders={thread.user_id: "user_id"}, what="thread")
    # Nor may it list her as taking part, as `thread_create` refuses it (her erasure took her out
    # of every participants list at one step).
    participants_erasing_refuse(agent_id=agent.pk, before={}, after=metadata, field=PARTICIPANTS_FIELD)
    seqs, stored = _import_ids(agent=agent, nodes=nodes)
    entries = _import_entries(thread=thread, nodes=nodes, seqs=seqs, stored=stored)
    # A message sent by a person being erased is refused (409), as an append refuses it: stored
    # after her erasure took her messages, it would outlive it (memoryapp.subjects.erasing, step 5).
    senders = {e.sender: f"nodes[{i}].metadata.{MESSAGE_USER_KEY}" for i, e in reversed(list(enumerate(entries)))}
    senders.pop("", None)
    if senders:
        senders_erasing_refuse(agent_id=agent.pk, senders=senders)
    if leaf_id is not None and leaf_id not in seqs:
        raise DomainError("unknown_leaf", "The head names no node of the file.", field="leaf")
    leaf_id = stored[leaf_id] if leaf_id is not None else None
    if screener is not None:
        entries_screened(
            entries=entries,
            screener=screener,
            prefixes=[f"nodes[{i}]." for i in range(len(entries))],
            now=timezone.now(),
        )
    entries.sort(key=lambda e: e.seq)
    # Sealed as an append seals them: a turn naming registered people under their keys too.
    entries_sealed_for_people(thread=thread, locked=thread, entries=entries)
    Entry.objects.bulk_create(entries, batch_size=1000)
    _import_thread_state(
        thread=thread, entries=entries, leaf_id=leaf_id, memory_enabled=memory_enabled, memory_off=memory_off
    )
    audit_append(
        action="thread.import",
        actor=actor,
        agent_id=agent.pk,
        thread_id=external_id,
        subject=external_id,
        outcome="imported",
        details={"entries": len(entries)},
        person=thread.user_id,
    )
    if screener is not None:
        screener.record(actor=actor, thread_id=external_id, subject=external_id, person=thread.user_id)
    event_record(agent_id=agent.pk, type="entry.added", thread_id=external_id, ids=[e.id for e in entries])
    mentions_record(
        agent=agent,
        rows=[
            (SubjectMention.Table.THREAD, thread.pk, thread),
            *((SubjectMention.Table.ENTRY, e.id, e) for e in entries),
        ],
    )
    after_entries_added(thread=thread, entries=entries)
    return thread


def _import_thread_create(
    *,
    agent: Agent,
    external_id: str,
    user_id: str,
    metadata: dict[str, Any],
    created_at: datetime | None,
    memory_enabled: bool,
    memory_off: list[dict[str, Any]] | None,
) -> Thread:
    """Step 1 for the thread: a new row, or 409 `thread_exists`."""
    try:
        # A plain insert, not the upsert: an import never writes into a thread that exists,
        # even one another request created a moment ago.
        with transaction.atomic():
            thread = Thread(
                agent=agent,
                external_id=external_id,
                user_id=person_id_check(user_id),
                metadata=metadata,
                memory_enabled=memory_enabled,
                extraction={OFF_RANGES_KEY: list(memory_off)} if memory_off else {},
            )
            thread_key_people_set(thread)  # metadata naming others: sealed under their keys too
            thread.save(force_insert=True)
    except IntegrityError:
        raise DomainError("thread_exists", "A thread with this id exists already.", field="id", status=409)
    if created_at is not None:  # auto_now_add set it on insert
        Thread.objects.filter(pk=thread.pk).update(created_at=created_at)
        thread.created_at = created_at
    return thread


def _import_ids(*, agent: Agent, nodes: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """Steps 1 and 2 for the ids: each node's id and seq, checked (unique, positive), and the id each
    is stored under; 409 `entry_exists` when one of this agent's entries holds one already."""
    seqs: dict[str, int] = {}
    for index, node in enumerate(nodes):
        where = f"nodes[{index}]"
        node_id, seq = entry_id_check(node.get("id"), field=f"{where}.id"), node.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
            raise DomainError("invalid_value", "Each node needs a positive integer seq.", field=f"{where}.seq")
        if node_id in seqs:
            raise DomainError("duplicate_id", f"The node id {node_id} appears twice.", field=f"{where}.id")
        seqs[node_id] = seq
    if len(set(seqs.values())) != len(seqs):
        raise DomainError("duplicate_seq", "Two nodes share a seq.", field="nodes")
    # The ids the nodes are stored under: their own when made for this agent, else derived from
    # them (memoryapp.ids): only this agent's own rows can be in the way, so nothing here says
    # whether another agent holds an id.
    stored = {node_id: entry_id_imported(node_id, agent_id=agent.pk) for node_id in seqs}
    if len(set(stored.values())) != len(stored):
        # A foreign id and the id derived from it, both in the file: two nodes stored under one id.
        first: dict[str, str] = {}
        for index, (node_id, kept) in enumerate(stored.items()):
            if kept in first:
                raise DomainError(
                    "duplicate_id",
                    f"The node ids {first[kept]} and {node_id} are stored under one id ({kept}).",
                    field=f"nodes[{index}].id",
                )
            first[kept] = node_id
    taken = list(Entry.objects.filter(agent=agent, id__in=list(stored.values())).values_list("id", flat=True)[:1])
    if taken:
        raise DomainError("entry_exists", f"An entry {taken[0]} exists already.", field="nodes", status=409)
    return seqs, stored


def _import_entries(
    *, thread: Thread, nodes: list[dict[str, Any]], seqs: dict[str, int], stored: dict[str, str]
) -> list[Entry]:
    """Step 2 for the entries, unsaved: checked as `entry_add` checks them, each parent an earlier node
    of the file, a node marked redacted stored as a redaction leaves an entry."""
    entries: list[Entry] = []
    for index, node in enumerate(nodes):
        where = f"nodes[{index}]."
        parent_id = node.get("parent_id")
        if parent_id is not None and (parent_id not in seqs or seqs[parent_id] >= node["seq"]):
            raise DomainError(
                "unknown_parent", "A node's parent must be an earlier node of the file.", field=f"{where}parent_id"
            )
        entry = entry_from_spec(
            thread=thread,
            spec={**node, "id": stored[node["id"]]},
            parent_id=stored[parent_id] if parent_id is not None else None,
            seq=node["seq"],
            now=timezone.now(),
            field_prefix=where,
            require_event=False,
        )
        redacted_at = node.get("redacted_at")
        if redacted_at is not None:
            _import_redacted(entry, redacted_at, field=f"{where}redacted_at")
        entries.append(entry)
    return entries


def _import_thread_state(
    *,
    thread: Thread,
    entries: list[Entry],
    leaf_id: str | None,
    memory_enabled: bool,
    memory_off: list[dict[str, Any]] | None,
) -> None:
    """Step 3 for the thread: its next seq after the largest, its leaf, whether it is one chain, and
    its memory switch's open range."""
    next_seq = (entries[-1].seq + 1) if entries else 1
    # One chain: one root, no entry with two children, and the leaf is the newest entry.
    parents = [e.parent_id for e in entries]
    chain = (
        parents.count(None) <= 1
        and len(set(parents)) == len(parents)
        and leaf_id == (entries[-1].id if entries else None)
    )
    epoch = 0 if chain else 1
    changes: dict[str, Any] = {
        "next_seq": next_seq,
        "active_leaf_id": leaf_id,
        "branch_epoch": epoch,
        "history_tokens": None,
    }
    if not memory_enabled:
        # Off: the turns written from now on are off too. A file whose last range is not open, or
        # opens it past the thread's next seq, would leave them out of every range (extracted once
        # memory is turned on): the open range starts at the next seq at the latest.
        off = [dict(r) for r in memory_off or []]
        if off and off[-1].get("to_seq") is None:
            off[-1]["from_seq"] = min(int(off[-1]["from_seq"]), next_seq)
        else:
            off.append({"from_seq": next_seq, "to_seq": None})
        changes["extraction"] = {**(thread.extraction or {}), OFF_RANGES_KEY: off}
    Thread.objects.filter(pk=thread.pk).update(**changes)
    thread.next_seq, thread.active_leaf_id, thread.branch_epoch = next_seq, leaf_id, epoch
    thread.history_tokens = None
    if "extraction" in changes:
        thread.extraction = changes["extraction"]
