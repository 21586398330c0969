"""Writes of threads and entries: the conversation store as a tree (004 "Threads as Trees").

Concurrency: every write that hands out a `seq` or moves the leaf first locks the thread row
(`SELECT ... FOR UPDATE`). Writers of one thread queue on that lock, so seq comes from
`thread.next_seq` strictly increasing and gap-free, and the leaf always ends on an entry one
of them wrote. Writers of different threads never wait for each other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from psycopg.types.json import Jsonb

from governance.audit import audit_append
from memoryapp.content import REDACTED_TEXT, content_text
from memoryapp.errors import DomainError, NotFound
from memoryapp.forgetting.lineage import AUDIT_IDS, derived_forget
from memoryapp.ids import entry_id_check, new_id, thread_id_check
from memoryapp.models import Agent, Entry, Thread
from memoryapp.models.choices import EVENT_TYPES, EntryType, Role
from memoryapp.retry import atomic_retrying
from memoryapp.storable import storable_text_check
from memoryapp.threads.hooks import after_entries_added
from memoryapp.threads.selectors import entry_on_branch, thread_for_agent, tool_call_name_on_branch
from memoryapp.tokens import count_message_tokens

# Limits, each with its own error code (README "Limits").
MAX_ENTRY_BYTES = 1024 * 1024  # JSON of one entry's content, tool calls, event and metadata
MAX_BATCH_ENTRIES = 1000
MAX_THREAD_METADATA_BYTES = 64 * 1024
MAX_SHORT_FIELD = 200  # tool_call_id, tool_name, sender_name

_ENTRY_TYPES = {str(t) for t in EntryType}
_ROLES = {str(r) for r in Role}
_EVENT_TYPES = {str(t) for t in EVENT_TYPES}


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def _millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def content_hash(*, parent_id: str | None, turn: dict[str, Any], created_at: datetime) -> str:
    """000 `hashNode`: sha256 over JSON.stringify({parent, turn, createdAt}), first 32 hex digits.

    A root's parent is JSON null, so a root never hashes like a chained node. Keys are sorted:
    JSONB stores objects in its own key order, and the hash must come out the same when it is
    computed again from the stored entry (an import, a check).
    """
    raw = json.dumps(
        {"parent": parent_id, "turn": turn, "createdAt": _millis(created_at)},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _turn(entry: Entry) -> dict[str, Any]:
    """The part of an entry that the hash covers: what was said, by whom, in which form."""
    turn: dict[str, Any] = {"type": entry.type, "role": entry.role, "content": entry.content}
    if entry.tool_calls:
        turn["toolCalls"] = entry.tool_calls
    if entry.tool_call_id:
        turn["toolCallId"] = entry.tool_call_id
    if entry.event is not None:
        turn["event"] = entry.event
    return turn


def reparent(moves: dict[str, str | None]) -> int:
    """Give entries new parents (a splice), their content hash computed anew: the hash covers the
    parent, so a stored one would no longer match the entry (an export re-imported would differ)."""
    if not moves:
        return 0
    rows = list(Entry.objects.filter(id__in=list(moves)).defer("embedding", "search_vector"))
    for row in rows:
        row.parent_id = moves[row.id]
        row.content_hash = content_hash(parent_id=row.parent_id, turn=_turn(row), created_at=row.created_at)
    Entry.objects.bulk_update(rows, ["parent_id", "content_hash"], batch_size=500)
    return len(rows)


def entry_text(*, content: Any, tool_calls: list[dict[str, Any]] | None) -> str:
    """The plain text of an entry: its content, and the names and arguments of its tool calls."""
    parts = [content_text(content)]
    for call in tool_calls or []:
        arguments = call.get("arguments")
        rendered = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        parts.append(f"{call.get('name', '')}({rendered})")
    return "\n".join(p for p in parts if p)


# --- validation ----------------------------------------------------------------------------


def _check_str(value: Any, field: str, *, max_length: int = MAX_SHORT_FIELD) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DomainError("invalid_type", f"{field} must be a string.", field=field)
    if len(value) > max_length:
        raise DomainError("too_long", f"{field} is longer than {max_length} characters.", field=field)
    if "\x00" in value:
        raise DomainError("invalid_value", f"{field} contains a NUL character.", field=field)
    return value


def _check_content(content: Any, field: str = "content") -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise DomainError("invalid_type", "content must be text or a list of content blocks.", field=field)
    for index, block in enumerate(content):
        if isinstance(block, str):
            continue
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise DomainError(
                "invalid_type", "Each content block must be an object with a `type`.", field=f"{field}[{index}]"
            )


def normalize_tool_calls(tool_calls: Any, field: str = "tool_calls") -> list[dict[str, Any]] | None:
    """Tool calls as stored: a list of {"id", "name", "arguments"} (`input` is read as arguments)."""
    if tool_calls is None:
        return None
    if not isinstance(tool_calls, list):
        raise DomainError("invalid_type", "tool_calls must be a list.", field=field)
    calls: list[dict[str, Any]] = []
    for index, call in enumerate(tool_calls):
        where = f"{field}[{index}]"
        if not isinstance(call, dict):
            raise DomainError("invalid_type", "Each tool call must be an object.", field=where)
        call_id, name = call.get("id"), call.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise DomainError("invalid_value", "Each tool call needs a string `id`.", field=f"{where}.id")
        if not isinstance(name, str) or not name:
            raise DomainError("invalid_value", "Each tool call needs a string `name`.", field=f"{where}.name")
        arguments = call.get("arguments", call.get("input", {}))
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    return calls or None


def _check_metadata(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DomainError("invalid_type", f"{field} must be an object.", field=field)
    return value


def thread_metadata_check(metadata: Any, *, field: str = "metadata") -> dict[str, Any]:
    """Thread metadata as every way in checks it (the API, the admin's form, an import): a JSON
    object, of text PostgreSQL can keep (no NUL, no lone surrogate), at most 64 KiB."""
    if not isinstance(metadata, dict):
        raise DomainError("invalid_type", f"{field} must be a JSON object.", field=field)
    storable_text_check(metadata, field=field)
    if _json_size(metadata) > MAX_THREAD_METADATA_BYTES:
        raise DomainError(
            "metadata_too_large", f"Thread metadata is at most {MAX_THREAD_METADATA_BYTES} bytes.", field=field
        )
    return metadata


def _entry_from_spec(
    *,
    thread: Thread,
    spec: dict[str, Any],
    parent_id: str | None,
    seq: int,
    now: datetime,
    field_prefix: str = "",
    require_event: bool = True,
) -> Entry:
    """A validated, unsaved Entry from one entry's fields (no queries). An import takes event
    entries stored before their payload was required (`require_event=False`)."""

    def f(name: str) -> str:
        return f"{field_prefix}{name}"

    kind = spec.get("type") or EntryType.MESSAGE
    if not isinstance(kind, str) or kind not in _ENTRY_TYPES:
        raise DomainError("invalid_type", f"type must be one of {sorted(_ENTRY_TYPES)}.", field=f("type"))
    role = spec.get("role") or ""
    if not isinstance(role, str) or (role and role not in _ROLES):
        raise DomainError("invalid_role", f"role must be one of {sorted(_ROLES)}.", field=f("role"))
    content = spec.get("content")
    _check_content(content, f("content"))
    tool_calls = normalize_tool_calls(spec.get("tool_calls"), f("tool_calls"))
    tool_call_id = _check_str(spec.get("tool_call_id"), f("tool_call_id"))
    tool_name = _check_str(spec.get("tool_name"), f("tool_name"))
    sender_name = _check_str(spec.get("sender_name"), f("sender_name"))
    event = spec.get("event")
    if event is not None and not isinstance(event, dict):
        raise DomainError("invalid_type", "event must be an object.", field=f("event"))
    metadata = _check_metadata(spec.get("metadata"), f("metadata"))
    if kind == EntryType.MESSAGE:
        if content is None and not tool_calls:
            raise DomainError("required", "A message needs content (or tool calls).", field=f("content"))
        if not role:
            raise DomainError("required", "A message needs a role.", field=f("role"))
        if role == Role.TOOL:
            raise DomainError("invalid_role", "A tool's answer is a `tool_result` entry.", field=f("role"))
    elif kind == EntryType.TOOL_RESULT:
        role = role or Role.TOOL
        if role != Role.TOOL:
            raise DomainError("invalid_role", "A tool result has the role `tool`.", field=f("role"))
        if not tool_call_id:
            raise DomainError("required", "A tool result needs the tool_call_id it answers.", field=f("tool_call_id"))
        if tool_calls:
            raise DomainError("invalid_value", "A tool result makes no tool calls.", field=f("tool_calls"))
    else:
        if tool_calls:
            raise DomainError("invalid_value", "An event makes no tool calls.", field=f("tool_calls"))
        if event is None and require_event:
            raise DomainError("required", f"A {kind} event carries its payload in `event`.", field=f("event"))
    if tool_calls and role != Role.ASSISTANT:
        raise DomainError("invalid_value", "Only assistant messages make tool calls.", field=f("tool_calls"))
    token_count = spec.get("token_count")
    if token_count is not None and (
        isinstance(token_count, bool) or not isinstance(token_count, int) or not 0 <= token_count < 2**31
    ):
        raise DomainError("invalid_value", "token_count must be a non-negative integer.", field=f("token_count"))
    size = _json_size([content, tool_calls, event, metadata])
    if size > MAX_ENTRY_BYTES:
        raise DomainError(
            "entry_too_large",
            f"An entry holds at most {MAX_ENTRY_BYTES} bytes of JSON (this one {size}).",
            field=f("content"),
            status=413,
        )
    created_at = spec.get("created_at") or now
    if not isinstance(created_at, datetime):
        raise DomainError("invalid_type", "created_at must be a date-time.", field=f("created_at"))
    if timezone.is_naive(created_at):
        created_at = timezone.make_aware(created_at, UTC)
    if token_count is None:
        token_count = count_message_tokens(content, tool_calls) if (content is not None or tool_calls) else 0
    given_id = spec.get("id")
    entry = Entry(
        id=new_id("ent") if given_id is None else entry_id_check(given_id, field=f("id")),
        agent_id=thread.agent_id,
        # By id, then cached: the descriptor's checks cost more than the rest of the row.
        thread_id=thread.pk,
        parent_id=parent_id,
        seq=seq,
        type=kind,
        role=role,
        content=content,
        text=entry_text(content=content, tool_calls=tool_calls),
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        sender_name=sender_name,
        token_count=token_count,
        event=event,
        metadata=metadata,
        created_at=created_at,
    )
    Entry.thread.field.set_cached_value(entry, thread)
    entry.content_hash = content_hash(parent_id=parent_id, turn=_turn(entry), created_at=created_at)
    return entry


# --- threads -------------------------------------------------------------------------------


def _new_thread_id(given: Any, *, field: str) -> str:
    """The client's id of a new thread, checked (`thread_id_check`), or a generated one."""
    if given is None or given == "":
        return new_id("thr")
    return thread_id_check(given, field=field)


def _lock(thread: Thread) -> Thread:
    """The thread's row, locked until the transaction ends; NotFound when it was deleted meanwhile."""
    locked = Thread.objects.select_for_update().filter(pk=thread.pk).first()
    if locked is None:
        raise NotFound("Thread")
    return locked


def _sync(target: Thread, source: Thread) -> None:
    """Let the caller's thread object see what the write changed."""
    for name in ("active_leaf_id", "next_seq", "updated_at", "metadata", "user_id", "branch_epoch"):
        setattr(target, name, getattr(source, name))


@transaction.atomic
def thread_create(
    *,
    agent: Agent,
    external_id: str | None = None,
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    actor: str = "",
) -> Thread:
    """Create a thread, or update the one of that id (an idempotent upsert, safe on every run).

    An existing thread keeps its entries and `created_at`; the given metadata keys are merged
    into its metadata as PATCH merges them (a null removes the key; the result is size-checked)
    and a given `user_id` replaces the old one (audited as `thread_update` audits it).
    """
    external_id = _new_thread_id(external_id, field="id")
    user_id = _check_str(user_id, "user_id", max_length=128)
    metadata = thread_metadata_check({} if metadata is None else metadata)
    existing = Thread.objects.select_for_update().filter(agent=agent, external_id=external_id).first()
    if existing is None:
        try:
            with transaction.atomic():
                return Thread.objects.create(
                    agent=agent, external_id=external_id, user_id=user_id, metadata=_merged_metadata({}, metadata)
                )
        except IntegrityError:
            # Another request created it between our read and our insert: update that one.
            existing = Thread.objects.select_for_update().get(agent=agent, external_id=external_id)
    existing.metadata = _merged_metadata(existing.metadata, metadata)
    if user_id and user_id != existing.user_id:
        _audit_user_change(existing, old=existing.user_id, new=user_id, actor=actor)
        existing.user_id = user_id
    existing.save(update_fields=["metadata", "user_id", "updated_at"])
    return existing


def _audit_user_change(thread: Thread, *, old: str, new: str, actor: str) -> None:
    """Whose thread it is decides what an erasure or an export of a person takes: a change of it is
    audited (the two person ids, which are identifiers, never the metadata)."""
    audit_append(
        action="thread.user_change",
        actor=actor,
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        subject=thread.external_id,
        outcome="changed",
        details={"from_user_id": old, "to_user_id": new},
    )


def _merged_metadata(current: dict[str, Any] | None, changes: dict[str, Any]) -> dict[str, Any]:
    """Metadata with the changes merged key by key (a null value removes the key), size checked."""
    merged = dict(current or {})
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if _json_size(merged) > MAX_THREAD_METADATA_BYTES:
        raise DomainError(
            "metadata_too_large", f"Thread metadata is at most {MAX_THREAD_METADATA_BYTES} bytes.", field="metadata"
        )
    return merged


@transaction.atomic
def thread_update(
    *,
    thread: Thread,
    metadata: dict[str, Any] | None = None,
    user_id: str | None = None,
    replace_metadata: bool = False,
    actor: str = "",
) -> Thread:
    """Update a thread's metadata atomically (merged key by key; a null value removes the key) and
    its person (`user_id`: a change is audited as `thread.user_change`, with both ids)."""
    locked = _lock(thread)
    if metadata is not None:
        metadata = thread_metadata_check(metadata)
        locked.metadata = _merged_metadata({} if replace_metadata else locked.metadata, metadata)
    if user_id is not None:
        user_id = _check_str(user_id, "user_id", max_length=128)
        if user_id != locked.user_id:
            _audit_user_change(locked, old=locked.user_id, new=user_id, actor=actor)
        locked.user_id = user_id
    locked.save(update_fields=["metadata", "user_id", "updated_at"])
    _sync(thread, locked)
    return locked


@atomic_retrying
def thread_delete(*, thread: Thread, actor: str = "") -> None:
    """Delete a thread and every entry of it, first what memory derived from them (`derived_forget`),
    and the copies of its entries in its forks (004: they go with their originals).

    Lock order, the same in every cascade: the thread, its forks level by level (`fork_copies`),
    `derived_forget`'s advisory locks, then the rows that go, in id order, just before they go.
    A deadlock victim is run again (`atomic_retrying`).
    """
    locked = _lock(thread)
    doomed = list(Entry.objects.filter(thread=locked).only("id", "agent_id", "thread_id"))
    copies = fork_copies(doomed)
    derived_forget(
        agent=locked.agent, entries=[*doomed, *copies], reason="thread.delete", actor=actor, entries_deleted=True
    )
    count = len(doomed)
    _lock_rows(Entry.objects.filter(thread=locked))
    # Children point at their parents with DO_NOTHING; the parent constraint is checked at
    # commit, when the whole tree is gone, so the cascade may delete in any order.
    audit_append(
        action="thread.delete",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=locked.external_id,
        outcome="deleted",
        details={"entries": count, "fork_copies": len(copies)},
    )
    locked.delete()
    _delete_fork_copies(copies, reason="thread.delete", actor=actor)


# --- entries -------------------------------------------------------------------------------


def _insert(
    *, thread: Thread, specs: Sequence[dict[str, Any]], field_prefix: str = "", locked: Thread | None = None
) -> list[Entry]:
    """Validate and insert entries after one another, under the thread lock the caller holds.

    1. Lock the thread row; read next_seq and the active leaf.
    2. For each entry: its parent is the explicit `parent_id` (checked to be in this thread),
       else the entry before it in the batch, else the active leaf; seq is the next one; a
       tool result without a name takes it from the matching tool call on its branch.
    3. Insert them all in one statement; move the leaf (to the last entry asked to activate),
       advance next_seq in one UPDATE of the thread (its updated_at is left: 004 moves it only
       when the thread is created or its metadata changes).
    4. Hand them to the hooks inside the transaction (they send jobs only on commit).

    `locked` is the thread's row when the caller read it locked in this transaction.
    """
    locked = locked or _lock(thread)
    now = timezone.now()
    seq = locked.next_seq
    leaf_id = locked.active_leaf_id
    previous: str | None = leaf_id
    explicit = {
        str(spec["parent_id"]) for spec in specs if isinstance(spec.get("parent_id"), str) and spec.get("parent_id")
    }
    known_parents: set[str] = set()
    if explicit:
        known_parents = set(Entry.objects.filter(thread=locked, id__in=explicit).values_list("id", flat=True))
    batch_calls: dict[str, str] = {}
    entries: list[Entry] = []
    branched = False  # does this write make the tree more than one chain ending at the leaf?
    for index, spec in enumerate(specs):
        prefix = f"{field_prefix}[{index}]." if field_prefix else ""
        if not isinstance(spec, dict):
            raise DomainError("invalid_type", "Each entry must be an object.", field=f"{field_prefix}[{index}]")
        parent_id = spec.get("parent_id")
        if parent_id is not None and not isinstance(parent_id, str):
            raise DomainError("invalid_type", "parent_id must be a string.", field=f"{prefix}parent_id")
        if parent_id:
            if parent_id not in known_parents:
                raise DomainError(
                    "unknown_parent", "parent_id is not an entry of this thread.", field=f"{prefix}parent_id"
                )
            branched = branched or parent_id != previous
        else:
            parent_id = previous
        activate = spec.get("activate", True)
        if not isinstance(activate, bool):
            raise DomainError("invalid_type", "activate must be true or false.", field=f"{prefix}activate")
        entry = _entry_from_spec(thread=locked, spec=spec, parent_id=parent_id, seq=seq, now=now, field_prefix=prefix)
        if entry.type == EntryType.TOOL_RESULT and not entry.tool_name:
            entry.tool_name = batch_calls.get(entry.tool_call_id) or tool_call_name_on_branch(
                thread=locked, leaf_id=parent_id, tool_call_id=entry.tool_call_id
            )
        for call in entry.tool_calls or []:
            batch_calls[call["id"]] = call["name"]
        entries.append(entry)
        known_parents.add(entry.id)
        previous = entry.id
        seq += 1
        if activate:
            leaf_id = entry.id
        else:
            branched = True
    if len(entries) == 1:
        entries[0].save(force_insert=True)
    else:
        _bulk_insert(entries)
    changes: dict[str, Any] = {"next_seq": seq, "active_leaf_id": leaf_id}
    if branched:
        changes["branch_epoch"] = locked.branch_epoch = locked.branch_epoch + 1
    Thread.objects.filter(pk=locked.pk).update(**changes)
    locked.next_seq, locked.active_leaf_id = seq, leaf_id
    _sync(thread, locked)
    after_entries_added(thread=thread, entries=entries)
    return entries


# The columns a new entry is written with; the rest start NULL (embedding, redaction) or are
# generated by the database (search_vector).
_TEXT_COLUMNS = ("id", "parent_id", "type", "role", "text", "tool_call_id", "tool_name", "sender_name", "content_hash")
_JSON_COLUMNS = ("content", "tool_calls", "event", "metadata")


def _bulk_insert(entries: Sequence[Entry]) -> None:
    """Insert a batch with COPY: psycopg formats the rows in C, which costs a quarter of the
    client-side parsing of one multi-row INSERT (and a tenth of bulk_create's) at 100 rows. The
    generated search_vector and the indexes are filled by PostgreSQL as for an INSERT."""
    columns = ("agent_id", "thread_id", *_TEXT_COLUMNS, *_JSON_COLUMNS, "seq", "token_count", "created_at")
    statement = f"COPY memoryapp_entry ({', '.join(columns)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.copy(statement) as copy:
        for e in entries:
            copy.write_row(
                (
                    e.agent_id,
                    e.thread_id,
                    *(getattr(e, column) for column in _TEXT_COLUMNS),
                    *(None if (value := getattr(e, column)) is None else Jsonb(value) for column in _JSON_COLUMNS),
                    e.seq,
                    e.token_count,
                    e.created_at,
                )
            )


@transaction.atomic
def entry_add(
    *,
    thread: Thread,
    type: str = "message",
    role: str = "",
    content: Any = None,
    parent_id: str | None = None,
    activate: bool = True,
    tool_calls: list[Any] | None = None,
    tool_call_id: str = "",
    tool_name: str = "",
    sender_name: str = "",
    token_count: int | None = None,
    event: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    created_at: datetime | None = None,
) -> Entry:
    """Add one entry: after the active leaf (moving it there), or under `parent_id`.

    With `activate=False` the leaf stays where it is. See `_insert` for the steps.
    """
    spec = {
        "type": type,
        "role": role,
        "content": content,
        "parent_id": parent_id,
        "activate": activate,
        "tool_calls": tool_calls,
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "sender_name": sender_name,
        "token_count": token_count,
        "event": event,
        "metadata": metadata,
        "created_at": created_at,
    }
    return _insert(thread=thread, specs=[spec])[0]


@transaction.atomic
def entries_add(*, thread: Thread, entries: list[dict[str, Any]]) -> list[Entry]:
    """Add a batch in one transaction, each entry after the one before (unless it names a parent).

    Each dict takes the keyword arguments of `entry_add`. All or nothing: a bad entry is a 400
    naming `entries[i].<field>` and nothing of the batch is written.
    """
    if not isinstance(entries, list) or not entries:
        raise DomainError("required", "entries must be a non-empty list.", field="entries")
    if len(entries) > MAX_BATCH_ENTRIES:
        raise DomainError(
            "batch_too_large",
            f"A batch holds at most {MAX_BATCH_ENTRIES} entries (this one {len(entries)}).",
            field="entries",
            status=413,
        )
    return _insert(thread=thread, specs=entries, field_prefix="entries")


@transaction.atomic
def thread_append(
    *, agent: Agent, external_id: str, entries: list[dict[str, Any]], field_prefix: str = ""
) -> tuple[Thread, list[Entry]]:
    """Add entries to the agent's thread of that id, found and locked by one query (the API's
    write path: one round trip less than a lookup and then a lock). Entries as `entries_add`."""
    thread = thread_for_agent(agent=agent, external_id=external_id, for_update=True)
    return thread, _insert(thread=thread, specs=entries, field_prefix=field_prefix, locked=thread)


@transaction.atomic
def thread_rewind(*, thread: Thread, entry_id: str, actor: str = "") -> Thread:
    """Move the active leaf back to an entry of the active branch; nothing is deleted."""
    locked = _lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    if not entry_on_branch(thread=locked, leaf_id=locked.active_leaf_id, entry_id=entry_id):
        raise DomainError("not_on_branch", "entry_id is not on the active branch.", field="entry_id")
    previous = locked.active_leaf_id
    # The entries after the new leaf are off its branch from now on.
    locked.branch_epoch += entry_id != previous
    locked.active_leaf_id = entry_id
    locked.save(update_fields=["active_leaf", "branch_epoch"])
    audit_append(
        action="thread.rewind",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=entry_id,
        outcome="rewound",
        details={"from": previous, "to": entry_id},
    )
    _sync(thread, locked)
    return locked


@transaction.atomic
def thread_checkout(*, thread: Thread, entry_id: str) -> Thread:
    """Make any entry of the thread the active leaf (its branch becomes the active one)."""
    locked = _lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    locked.branch_epoch += entry_id != locked.active_leaf_id
    locked.active_leaf_id = entry_id
    locked.save(update_fields=["active_leaf", "branch_epoch"])
    _sync(thread, locked)
    return locked


@transaction.atomic
def thread_fork(*, thread: Thread, entry_id: str, new_thread_id: str | None = None, actor: str = "") -> Thread:
    """Copy the branch from the root to `entry_id` into a new thread.

    1. Lock the origin; check the entry is in it; read the branch (all types) root first.
    2. Create the new thread (409 `thread_exists` when the id is taken) with the origin's
       user_id and metadata plus `forkedFrom` = the origin's id; `forked_from` points at it.
    3. Copy each entry with a new id and the same seq order, parents mapped to the copies,
       `metadata.forkOf` naming the original; the copy of `entry_id` is the new leaf.
    4. Append the new id to the origin's `metadata.memoryForks`; audit.
    """
    from memoryapp.threads.selectors import path_entries

    locked = _lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    new_external = _new_thread_id(new_thread_id, field="new_thread_id")
    if Thread.objects.filter(agent_id=locked.agent_id, external_id=new_external).exists():
        raise DomainError(
            "thread_exists", "A thread with new_thread_id exists already.", field="new_thread_id", status=409
        )
    branch = path_entries(thread=locked, leaf_id=entry_id, types=None)
    metadata = {k: v for k, v in (locked.metadata or {}).items() if k not in ("memoryForks", "forkedFrom")}
    metadata["forkedFrom"] = locked.external_id
    copy = Thread.objects.create(
        agent_id=locked.agent_id,
        external_id=new_external,
        user_id=locked.user_id,
        metadata=metadata,
        forked_from=locked,
    )
    mapping: dict[str, str] = {}
    copies: list[Entry] = []
    for seq, original in enumerate(branch, start=1):
        new_entry_id = new_id("ent")
        parent = mapping.get(original.parent_id) if original.parent_id else None
        mapping[original.id] = new_entry_id
        entry = Entry(
            id=new_entry_id,
            agent_id=original.agent_id,
            thread=copy,
            parent_id=parent,
            seq=seq,
            type=original.type,
            role=original.role,
            content=original.content,
            text=original.text,
            tool_calls=original.tool_calls,
            tool_call_id=original.tool_call_id,
            tool_name=original.tool_name,
            sender_name=original.sender_name,
            token_count=original.token_count,
            event=original.event,
            metadata={**(original.metadata or {}), "forkOf": original.id},
            created_at=original.created_at,
            redacted_at=original.redacted_at,
        )
        entry.content_hash = content_hash(parent_id=parent, turn=_turn(entry), created_at=entry.created_at)
        copies.append(entry)
    Entry.objects.bulk_create(copies)
    Thread.objects.filter(pk=copy.pk).update(next_seq=len(copies) + 1, active_leaf_id=copies[-1].id if copies else None)
    copy.refresh_from_db()
    forks = list((locked.metadata or {}).get("memoryForks") or [])
    forks.append(new_external)
    locked.metadata = {**(locked.metadata or {}), "memoryForks": forks}
    locked.save(update_fields=["metadata", "updated_at"])
    _sync(thread, locked)
    audit_append(
        action="thread.fork",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=new_external,
        outcome="forked",
        details={"at": entry_id, "entries": len(copies)},
    )
    after_entries_added(thread=copy, entries=copies)
    return copy


def fork_copies(entries: Sequence[Entry]) -> list[Entry]:
    """The copies of these entries in the threads forked from theirs, forks of forks followed
    (a copy names its original in `metadata.forkOf`): what goes, or is redacted, with them.

    Call with the entries' own threads locked. Each level of forks is locked (in pk order) before
    its copies are read, so no fork made meanwhile escapes, and every cascade locks a thread before
    its forks, all of them before `derived_forget`'s advisory locks, and those before the entry rows
    it changes (`_lock_rows`, in id order): cascades never deadlock with each other.
    """
    found: list[Entry] = []
    agent_ids = {e.agent_id for e in entries}
    threads = {e.thread_id for e in entries}
    ids = [e.id for e in entries]
    while ids:
        forks = list(
            Thread.objects.select_for_update()
            .filter(agent_id__in=agent_ids, forked_from_id__in=threads)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if not forks:
            break
        level = list(Entry.objects.select_related("thread").filter(thread_id__in=forks, metadata__forkOf__in=ids))
        found.extend(level)
        threads = {e.thread_id for e in level}
        ids = [e.id for e in level]
    return found


def _lock_rows(entries: QuerySet[Entry]) -> None:
    """Lock the entry rows a cascade is about to change or delete, in id order.

    A multi-row UPDATE or DELETE locks rows in the order of its plan; two of them over the same
    rows in different orders wait for each other. Taken first in one order, they cannot.
    """
    list(entries.select_for_update().order_by("pk").values_list("pk", flat=True))


def _splice_many(locked: Thread, doomed: set[str]) -> int:
    """Delete these entries of a locked thread; children and the leaf go to the nearest survivor."""
    parents = dict(Entry.objects.filter(thread=locked).values_list("id", "parent_id"))

    def survivor(entry_id: str | None) -> str | None:
        while entry_id is not None and entry_id in doomed:
            entry_id = parents.get(entry_id)
        return entry_id

    moves = {eid: survivor(pid) for eid, pid in parents.items() if eid not in doomed and pid in doomed}
    _lock_rows(Entry.objects.filter(thread=locked, pk__in=[*doomed, *moves]))
    reparent(moves)
    if locked.active_leaf_id in doomed:
        locked.active_leaf_id = survivor(locked.active_leaf_id)
        Thread.objects.filter(pk=locked.pk).update(active_leaf_id=locked.active_leaf_id)
    Entry.objects.filter(thread=locked, pk__in=doomed).delete()
    return len(moves)


def _delete_fork_copies(copies: Sequence[Entry], *, reason: str, actor: str) -> None:
    """Splice out the fork copies of deleted entries (their threads locked, `derived_forget` done)."""
    by_thread: dict[int, list[Entry]] = {}
    for copy in copies:
        by_thread.setdefault(copy.thread_id, []).append(copy)
    for thread_pk in sorted(by_thread):
        locked = _lock(by_thread[thread_pk][0].thread)
        doomed = {c.id for c in by_thread[thread_pk]}
        respliced = _splice_many(locked, doomed)
        audit_append(
            action="entry.delete",
            actor=actor,
            agent_id=locked.agent_id,
            thread_id=locked.external_id,
            subject=sorted(doomed)[0] if len(doomed) == 1 else f"{len(doomed)} fork copies",
            outcome="deleted",
            details={
                "fork_copies": len(doomed),
                "entry_ids": sorted(doomed)[:AUDIT_IDS],
                "children_respliced": respliced,
                "because": reason,
            },
        )


@atomic_retrying
def entry_delete(*, entry: Entry, actor: str = "") -> None:
    """Splice an entry out of its branch: its children go under its parent.

    1. Lock the thread, then its forks, reading the entry's copies there (`fork_copies`).
    2. Take what memory derived from the entry and its copies (`derived_forget`: items, quotes,
    file versions, the compactions covering them). 3. Re-parent the children to the entry's
    parent; if the entry was the active leaf, the leaf moves to its parent. 4. Delete the row; audit.
    5. Splice the copies out of the forks the same way.
    """
    thread = entry.thread
    locked = _lock(thread)
    copies = fork_copies([entry])
    derived_forget(
        agent=thread.agent, entries=[entry, *copies], reason="entry.delete", actor=actor, entries_deleted=True
    )
    current = Entry.objects.filter(pk=entry.pk, thread=locked).values_list("parent_id", flat=True)
    if not current.exists():
        raise NotFound("Entry")
    parent_id = current.first()
    child_ids = list(Entry.objects.filter(thread=locked, parent_id=entry.pk).values_list("id", flat=True))
    _lock_rows(Entry.objects.filter(thread=locked, pk__in=[entry.pk, *child_ids]))
    children = reparent(dict.fromkeys(child_ids, parent_id))
    if locked.active_leaf_id == entry.pk:
        locked.active_leaf_id = parent_id
        locked.save(update_fields=["active_leaf"])
    Entry.objects.filter(pk=entry.pk).delete()
    audit_append(
        action="entry.delete",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=entry.pk,
        outcome="deleted",
        details={"children_respliced": children, "fork_copies": len(copies)},
    )
    _delete_fork_copies(copies, reason="entry.delete", actor=actor)
    _sync(thread, locked)


def _redact_content(content: Any) -> Any:
    """Content with every text and tool payload replaced; block kinds and call ids kept."""
    if content is None:
        return None
    if isinstance(content, str):
        return REDACTED_TEXT
    if isinstance(content, list):
        blocks: list[Any] = []
        for block in content:
            if not isinstance(block, dict):
                blocks.append(REDACTED_TEXT)
                continue
            kind = block.get("type")
            kept = {k: block[k] for k in ("type", "id", "tool_use_id", "tool_call_id", "name") if k in block}
            if kind in ("text", "thinking"):
                kept["text"] = REDACTED_TEXT
            elif kind in ("tool_call", "tool_use"):
                kept["input" if "input" in block else "arguments"] = REDACTED_TEXT
            elif kind == "tool_result":
                kept["content" if "content" in block else "output"] = REDACTED_TEXT
            else:
                kept["text"] = REDACTED_TEXT
            blocks.append(kept)
        return blocks
    return REDACTED_TEXT


@atomic_retrying
def entry_redact(*, entry: Entry, reason: str = "", actor: str = "") -> Entry:
    """Replace what an entry said with `[redacted]`, keeping its place in the tree.

    Text, content blocks, tool call arguments and tool results become `[redacted]`; id, parent,
    seq, role, type, call ids and tool names stay; a user's sender name goes; the embedding is
    dropped and the content hash computed anew; `metadata.redacted` = {at, reason}. Event entries are refused (400).
    Its copies in forks are redacted the same way.
    """
    if entry.type in _EVENT_TYPES:
        raise DomainError("not_redactable", "Event entries cannot be redacted.", field="entry_id")
    reason = _check_str(reason, "reason", max_length=500)
    _lock(entry.thread)
    # Its copies in forks (and forks of forks) say the same words: they are redacted too.
    copies = [c for c in fork_copies([entry]) if c.redacted_at is None]
    # What memory derived from them goes first; see `derived_forget`.
    derived_forget(agent=entry.thread.agent, entries=[entry, *copies], reason="entry.redact", actor=actor)
    row = _redact_row(entry=entry, reason=reason, actor=actor)
    for copy in copies:
        _redact_row(entry=copy, reason=reason, actor=actor, copy_of=entry.id)
    return row


def _redaction_apply(row: Entry, *, at: datetime, record: dict[str, Any]) -> None:
    """Make an entry (saved or not) say nothing: what a redaction changes, for `entry_redact` and
    for an import of an entry redacted before its export. `record` goes to `metadata.redacted`."""
    row.content = _redact_content(row.content)
    if row.tool_calls:
        row.tool_calls = [{**call, "arguments": REDACTED_TEXT} for call in row.tool_calls]
    row.text = REDACTED_TEXT
    if row.role == Role.USER:
        row.sender_name = ""
    row.metadata = {**(row.metadata or {}), "redacted": record}
    row.redacted_at = at
    row.embedding = None
    row.embedded_at = None
    row.token_count = count_message_tokens(row.content, row.tool_calls)
    # The old hash was computed from the words said: a guess could be checked against it.
    row.content_hash = content_hash(parent_id=row.parent_id, turn=_turn(row), created_at=row.created_at)


def _redact_row(*, entry: Entry, reason: str, actor: str, copy_of: str | None = None) -> Entry:
    """Redact one entry whose thread the caller locked and whose derived memory it took."""
    locked = _lock(entry.thread)
    row = Entry.objects.select_for_update().filter(pk=entry.pk, thread=locked).first()
    if row is None:
        raise NotFound("Entry")
    now = timezone.now()
    _redaction_apply(row, at=now, record={"at": now.isoformat(), "reason": reason})
    row.save(
        update_fields=[
            "content",
            "tool_calls",
            "text",
            "sender_name",
            "metadata",
            "redacted_at",
            "embedding",
            "embedded_at",
            "token_count",
            "content_hash",
        ]
    )
    audit_append(
        action="entry.redact",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=row.pk,
        outcome="redacted",
        details={"reason_given": bool(reason), **({"fork_copy_of": copy_of} if copy_of else {})},
    )
    return row


def _import_redacted(entry: Entry, redacted_at: Any, *, field: str) -> None:
    """An entry the file says was redacted is stored redacted: a file that marks an entry so while
    keeping its words (hand-made, or edited) must not bring them back. Its own record of the
    redaction (`metadata.redacted`: at, reason) is kept, or one is written."""
    if not isinstance(redacted_at, datetime):
        raise DomainError("invalid_type", "redacted_at must be a date-time.", field=field)
    if entry.type in _EVENT_TYPES:
        raise DomainError("not_redactable", "Event entries cannot be redacted.", field=field)
    if timezone.is_naive(redacted_at):
        redacted_at = timezone.make_aware(redacted_at, UTC)
    record = (entry.metadata or {}).get("redacted")
    if not isinstance(record, dict):
        record = {"at": redacted_at.isoformat(), "reason": ""}
    _redaction_apply(entry, at=redacted_at, record=record)


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
) -> Thread:
    """Create a thread from exported entries, keeping their ids, parents, seq, times and metadata
    (and the thread's own `created_at` when the file gives it).

    1. Refuse an existing thread id (409 `thread_exists`) or entry id (409 `entry_exists`).
    2. Check each node: fields as `entry_add` checks them; seq unique and positive; its parent
       a node of the file with a smaller seq (so the tree has no cycle); the leaf one of them;
       a node marked redacted is stored as a redaction leaves an entry (`_import_redacted`).
    3. Insert all in one statement; the thread's next_seq follows the largest seq; audit.
    """
    external_id = _new_thread_id(external_id, field="id")
    metadata = thread_metadata_check({} if metadata is None else metadata)
    try:
        # A plain insert, not the upsert: an import never writes into a thread that exists,
        # even one another request created a moment ago.
        with transaction.atomic():
            thread = Thread.objects.create(
                agent=agent,
                external_id=external_id,
                user_id=_check_str(user_id, "user_id", max_length=128),
                metadata=metadata,
            )
    except IntegrityError:
        raise DomainError("thread_exists", "A thread with this id exists already.", field="id", status=409)
    if created_at is not None:  # auto_now_add set it on insert
        Thread.objects.filter(pk=thread.pk).update(created_at=created_at)
        thread.created_at = created_at
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
    taken = list(Entry.objects.filter(id__in=list(seqs)).values_list("id", flat=True)[:1])
    if taken:
        raise DomainError("entry_exists", f"An entry {taken[0]} exists already.", field="nodes", status=409)
    entries: list[Entry] = []
    for index, node in enumerate(nodes):
        where = f"nodes[{index}]."
        parent_id = node.get("parent_id")
        if parent_id is not None and (parent_id not in seqs or seqs[parent_id] >= node["seq"]):
            raise DomainError(
                "unknown_parent", "A node's parent must be an earlier node of the file.", field=f"{where}parent_id"
            )
        entry = _entry_from_spec(
            thread=thread,
            spec=node,
            parent_id=parent_id,
            seq=node["seq"],
            now=timezone.now(),
            field_prefix=where,
            require_event=False,
        )
        redacted_at = node.get("redacted_at")
        if redacted_at is not None:
            _import_redacted(entry, redacted_at, field=f"{where}redacted_at")
        entries.append(entry)
    if leaf_id is not None and leaf_id not in seqs:
        raise DomainError("unknown_leaf", "The head names no node of the file.", field="leaf")
    entries.sort(key=lambda e: e.seq)
    Entry.objects.bulk_create(entries, batch_size=1000)
    next_seq = (entries[-1].seq + 1) if entries else 1
    # One chain: one root, no entry with two children, and the leaf is the newest entry.
    parents = [e.parent_id for e in entries]
    chain = (
        parents.count(None) <= 1
        and len(set(parents)) == len(parents)
        and leaf_id == (entries[-1].id if entries else None)
    )
    epoch = 0 if chain else 1
    Thread.objects.filter(pk=thread.pk).update(next_seq=next_seq, active_leaf_id=leaf_id, branch_epoch=epoch)
    thread.next_seq, thread.active_leaf_id, thread.branch_epoch = next_seq, leaf_id, epoch
    audit_append(
        action="thread.import",
        actor=actor,
        agent_id=agent.pk,
        thread_id=external_id,
        subject=external_id,
        outcome="imported",
        details={"entries": len(entries)},
    )
    after_entries_added(thread=thread, entries=entries)
    return thread
