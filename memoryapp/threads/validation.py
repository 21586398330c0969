"""Checks of what a client sends for threads and entries: limits, types, roles, ids (no queries)."""

from __future__ import annotations

import functools
import json
import zoneinfo
from datetime import UTC, datetime
from typing import Any

from django.db.models import DEFERRED
from django.db.models.base import ModelState
from django.utils import timezone

from memoryapp.content import content_text
from memoryapp.errors import DomainError
from memoryapp.ids import entry_id_check, entry_id_new, new_id, person_id_check, thread_id_check
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import EVENT_TYPES, EntryType, Role
from memoryapp.models.people import FORK_OF_KEY, MEMORY_USERS_KEY, MESSAGE_USER_KEY, message_sender
from memoryapp.storable import storable_text_check
from memoryapp.threads.hashing import content_hash, content_hash_plain, hashed_turn
from memoryapp.tokens import count_message_tokens

# Limits, each with its own error code (docs/api.md, "Threads and entries": Limits).
MAX_ENTRY_BYTES = 1024 * 1024  # JSON of one entry's content, tool calls, event and metadata
MAX_BATCH_ENTRIES = 1000
MAX_THREAD_METADATA_BYTES = 64 * 1024
MAX_SHORT_FIELD = 200  # tool_call_id, tool_name, sender_name


_ENTRY_TYPES = {str(t) for t in EntryType}
_ROLES = {str(r) for r in Role}
EVENT_TYPE_VALUES = {str(t) for t in EVENT_TYPES}


# Made once: json.dumps with options makes an encoder each call (issue 26).
_SIZE_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)


def _json_size(value: Any) -> int:
    return len(_SIZE_ENCODER.encode(value).encode())


def entry_text(*, content: Any, tool_calls: list[dict[str, Any]] | None) -> str:
    """The plain text of an entry: its content, and the names and arguments of its tool calls."""
    parts = [content_text(content)]
    for call in tool_calls or []:
        arguments = call.get("arguments")
        rendered = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        parts.append(f"{call.get('name', '')}({rendered})")
    return "\n".join(p for p in parts if p)


def short_text_check(value: Any, field: str, *, max_length: int = MAX_SHORT_FIELD) -> str:
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


# Where a message says which person wrote it, and a thread lists the people who wrote in it (004's
# MEMORY_USERS_KEY; the one rule is memoryapp.models.people.message_sender): person ids, which a
# person's erasure looks for (memoryapp.forgetting.person), so they follow the one rule of person ids
# (`person_id_check`).

# The keys of thread metadata that name the thread's time zone (the context builder's and
# extraction's default zone): an IANA name, checked on the way in rather than read as UTC.
METADATA_ZONE_KEYS = ("time_zone", "timezone")


@functools.cache
def _iana_zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - {"localtime", "posixrules", "Factory"}


def thread_metadata_check(metadata: Any, *, field: str = "metadata") -> dict[str, Any]:
    """Thread metadata as every way in checks it (the API, the admin's form, an import): a JSON
    object, of text PostgreSQL can keep (no NUL, no lone surrogate), at most 64 KiB; its
    `time_zone` (or `timezone`), when given, an IANA zone name."""
    if not isinstance(metadata, dict):
        raise DomainError("invalid_type", f"{field} must be a JSON object.", field=field)
    storable_text_check(metadata, field=field)
    if isinstance(people := metadata.get(MEMORY_USERS_KEY), list):
        for index, person in enumerate(people):
            if isinstance(person, str):
                person_id_check(person, field=f"{field}.{MEMORY_USERS_KEY}[{index}]")
    for key in METADATA_ZONE_KEYS:
        zone = metadata.get(key)
        if zone not in (None, "") and (not isinstance(zone, str) or zone not in _iana_zone_names()):
            raise DomainError(
                "invalid_time_zone",
                f"{field}.{key} must be an IANA time zone name, such as Europe/Lisbon or UTC (got {str(zone)[:60]!r}).",
                field=f"{field}.{key}",
            )
    if _json_size(metadata) > MAX_THREAD_METADATA_BYTES:
        raise DomainError(
            "metadata_too_large", f"Thread metadata is at most {MAX_THREAD_METADATA_BYTES} bytes.", field=field
        )
    return metadata


def _entry_maker(field: Any) -> tuple[bool, Any]:
    """(made per entry, value) of a field an entry is not given: a generated column is left unset
    (as Model.__init__ leaves it), a callable default is made for each entry, any other default
    (None, "", 0: immutable) is taken as it is. So is a database default (stored_at's): the
    expression that stands for it is never changed in place (Django resolves a copy of it), and
    making one an entry cost 5% of a batch append's web CPU (issue 26)."""
    if getattr(field, "generated", False):
        return False, DEFERRED
    if field.has_default() and callable(field.default):
        return True, field.get_default
    return False, field.get_default()


# Entry's fields by attribute, in the model's order, with what one not given takes.
_ENTRY_FIELDS: tuple[tuple[str, bool, Any], ...] = tuple(
    (field.attname, *_entry_maker(field)) for field in Entry._meta.concrete_fields
)


_ENTRY_NAMES = frozenset(name for name, _, _ in _ENTRY_FIELDS)


# What an entry not given a field takes: the values taken as they are (immutable defaults, the
# database default's one expression), and the fields whose default is made for each entry.
_ENTRY_DEFAULTS: dict[str, Any] = {
    name: default for name, per_entry, default in _ENTRY_FIELDS if not per_entry and default is not DEFERRED
}
_ENTRY_MADE: tuple[tuple[str, Any], ...] = tuple((name, make) for name, per_entry, make in _ENTRY_FIELDS if per_entry)


def _entry_new(**given: Any) -> Entry:
    """`Entry(**given)`, its values put in place: Model.__init__ with keyword arguments looked every
    field up and asked it for its default, ~25% of a batch append's web CPU (issue 26); by position
    it still set each through setattr (the foreign keys' descriptors) and sent pre_init and
    post_init: 8 us an entry, 4 us put in place (a sixth of `entry_from_spec`), and the defaults
    taken in one update rather than field by field, half of that again. What it leaves is what
    Model.__init__ by position leaves: a fresh state, each field's value under its attribute name (no
    field of Entry has a descriptor that changes a value it is given, and nothing listens to Entry's
    init signals: tests/threads/test_entry_build.py), a generated column unset. The values not
    given are the fields' defaults, as Entry(**given) sets them."""
    if not given.keys() <= _ENTRY_NAMES:
        raise TypeError(f"Entry has no field {sorted(given.keys() - _ENTRY_NAMES)[0]}")
    entry = Entry.__new__(Entry)
    values = entry.__dict__
    values["_state"] = ModelState()
    values.update(_ENTRY_DEFAULTS)
    values.update(given)
    for name, make in _ENTRY_MADE:
        if name not in given:
            values[name] = make()
    return entry


# A plain message (text content, a role other than `tool`, nothing else but where it goes), the
# most of what a batch holds: `entry_from_spec` builds it without the checks that cannot fail for it.
_PLAIN_KEYS = frozenset({"type", "role", "content", "parent_id", "activate"})
_PLAIN_ROLES = frozenset(_ROLES - {str(Role.TOOL)})
# Each character of a text is at most 6 bytes of its JSON (`\u001f`): a text this short cannot make
# an entry larger than MAX_ENTRY_BYTES, and its size is not measured.
_PLAIN_MAX_CHARS = MAX_ENTRY_BYTES // 6 - 64


def _plain_message(
    *, thread: Thread, spec: dict[str, Any], parent_id: str | None, seq: int, now: datetime, hashed: bool
) -> Entry | None:
    """`entry_from_spec`'s entry for a plain message, or None when `spec` is not one. The same entry
    the checks below build (tests/threads/test_entry_build.py): no tool calls, event, metadata or
    sender, its text its content, created now, its tokens counted, its id made for the agent."""
    if not spec.keys() <= _PLAIN_KEYS:
        return None
    content, role = spec.get("content"), spec.get("role")
    if (
        type(content) is not str
        or type(role) is not str
        or role not in _PLAIN_ROLES
        or spec.get("type") not in (None, "", EntryType.MESSAGE)
        or len(content) > _PLAIN_MAX_CHARS
    ):
        return None
    entry = _entry_new(
        id=entry_id_new(agent_id=thread.agent_id),
        agent_id=thread.agent_id,
        thread_id=thread.pk,
        parent_id=parent_id,
        seq=seq,
        type=EntryType.MESSAGE,
        role=role,
        content=content,
        text=content,
        token_count=count_message_tokens(content),
        metadata={},
        created_at=now,
    )
    Entry.thread.field.set_cached_value(entry, thread)
    if hashed:
        entry.content_hash = content_hash_plain(parent_id=parent_id, role=role, content=content, created_at=now)
    return entry


def entry_from_spec(
    *,
    thread: Thread,
    spec: dict[str, Any],
    parent_id: str | None,
    seq: int,
    now: datetime,
    field_prefix: str = "",
    require_event: bool = True,
    hashed: bool = True,
) -> Entry:
    """A validated, unsaved Entry from one entry's fields (no queries). An import takes event
    entries stored before their payload was required (`require_event=False`). `hashed=False`
    leaves `content_hash` empty, for a writer that hashes the entry once it knows its parent."""

    if spec.get("created_at") is None and timezone.is_aware(now):
        plain = _plain_message(thread=thread, spec=spec, parent_id=parent_id, seq=seq, now=now, hashed=hashed)
        if plain is not None:
            return plain

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
    tool_call_id = short_text_check(spec.get("tool_call_id"), f("tool_call_id"))
    tool_name = short_text_check(spec.get("tool_name"), f("tool_name"))
    sender_name = short_text_check(spec.get("sender_name"), f("sender_name"))
    event = spec.get("event")
    if event is not None and not isinstance(event, dict):
        raise DomainError("invalid_type", "event must be an object.", field=f("event"))
    metadata = _check_metadata(spec.get("metadata"), f("metadata"))
    if isinstance(writer := metadata.get(MESSAGE_USER_KEY), str):
        person_id_check(writer, field=f"{f('metadata')}.{MESSAGE_USER_KEY}")
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
    entry = _entry_new(
        # An id given (an import's node, mapped by `thread_import`) is checked; else the agent's own.
        id=entry_id_new(agent_id=thread.agent_id) if given_id is None else entry_id_check(given_id, field=f("id")),
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
        # What SQL reads of the metadata (sealed at rest when encryption is on), in columns.
        sender=message_sender(metadata),
        fork_of=fork_of if isinstance(fork_of := metadata.get(FORK_OF_KEY), str) else "",
        created_at=created_at,
    )
    Entry.thread.field.set_cached_value(entry, thread)
    if hashed:
        entry.content_hash = content_hash(parent_id=parent_id, turn=hashed_turn(entry), created_at=created_at)
    return entry


def thread_id_or_new(given: Any, *, field: str) -> str:
    """The client's id of a new thread, checked (`thread_id_check`), or a generated one."""
    if given is None or given == "":
        return new_id("thr")
    return thread_id_check(given, field=field)


def metadata_merged(current: dict[str, Any] | None, changes: dict[str, Any]) -> dict[str, Any]:
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
