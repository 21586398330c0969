"""Reads of threads and entries: the one way in to an agent's conversations.

Every read an agent's request makes goes through `thread_for_agent` / `entry_for_agent` (or a
function here that takes the thread they returned), so another agent's thread answers the same
404 as a missing one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import JSONField, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.sql import Query

from governance.crypto.fields import json_text_open, pair_hashes_each_key
from governance.crypto.keyring import encryption_enabled
from memoryapp.errors import DomainError, NotFound
from memoryapp.models import Agent, Entry, Thread
from memoryapp.models.choices import HISTORY_TYPES
from memoryapp.paging import Page, decode_cursor, encode_cursor
from memoryapp.precompiled import Precompiled, models_loaded
from memoryapp.storable import time_in_range, unstorable_text_field
from memoryapp.threads.branch import branch_cte, branch_rows_sql, branch_sql
from memoryapp.threads.columns import ENTRY_COLUMNS, ENTRY_LIGHT_DEFER, ENTRY_TABLE

# An agent's thread by its id: (agent, external_id) is unique. Compiled once (memoryapp.precompiled):
# every request naming a thread makes this lookup.
_THREAD = Precompiled(
    lambda agent_id, external_id: Thread.objects.filter(agent_id=agent_id, external_id=external_id)[:1],
    -26,
    "\x00thread",
)
_THREAD_LOCKED = Precompiled(
    lambda agent_id, external_id: Thread.objects.select_for_update().filter(agent_id=agent_id, external_id=external_id)[
        :1
    ],
    -26,
    "\x00thread",
)


def thread_for_agent(*, agent: Agent, external_id: str, for_update: bool = False) -> Thread:
    """The agent's thread of that id; a missing one and another agent's answer the same 404.

    With `for_update` (inside a transaction) the row is locked until the transaction ends.
    """
    thread = (_THREAD_LOCKED if for_update else _THREAD).first(agent.pk, external_id)
    if thread is None:
        raise NotFound("Thread")
    # The writes read the agent's settings (screening) through the thread: no query for it.
    Thread.agent.field.set_cached_value(thread, agent)
    return thread


def entry_for_agent(*, agent: Agent, entry_id: str) -> Entry:
    """The agent's entry of that id (with its thread); another agent's answers the same 404."""
    entry = Entry.objects.select_related("thread").defer(*ENTRY_LIGHT_DEFER).filter(agent=agent, id=entry_id).first()
    if entry is None:
        raise NotFound("Entry")
    return entry


def _types_list(types: Iterable[str] | None) -> list[str] | None:
    return None if types is None else [str(t) for t in types]


def _on_branch(*, thread: Thread, leaf_id: str, entry_id: str) -> bool:
    """Whether `entry_id` is the leaf or one of its ancestors (the walk stops where it finds it, or
    below the entry's seq: an ancestor's seq is smaller than its child's, so what lies beyond cannot
    be it; an entry of another branch never has the walk read down to the root)."""
    target_seq = f"(SELECT t.seq - 1 FROM {ENTRY_TABLE} t WHERE t.id = %(target)s AND t.thread_id = %(thread)s)"
    with connection.cursor() as cursor:
        cursor.execute(
            branch_sql("SELECT 1 FROM branch WHERE id = %(target)s LIMIT 1", above_seq=target_seq),
            {"start": leaf_id, "thread": thread.pk, "target": entry_id},
        )
        return cursor.fetchone() is not None


def entry_on_branch(*, thread: Thread, leaf_id: str | None, entry_id: str) -> bool:
    """Whether `entry_id` lies on the branch ending at `leaf_id` (the leaf itself included)."""
    if not leaf_id:
        return False
    return _on_branch(thread=thread, leaf_id=leaf_id, entry_id=entry_id)


# Entry's fields in ENTRY_COLUMNS' order, and the attribute each value is kept under.
_ENTRY_READ_FIELDS = tuple(
    field for column in ENTRY_COLUMNS for field in Entry._meta.concrete_fields if field.column == column
)
_ENTRY_ATTNAMES: tuple[str, ...] = tuple(field.attname for field in _ENTRY_READ_FIELDS)


def _entries_read(sql: str, params: dict[str, Any]) -> list[Entry]:
    """The entries of `sql`'s rows (ENTRY_COLUMNS, in order), as `Entry.objects.raw` loads them: each
    column through its field's converters (the sealed fields open, JSON parsed), the instances as a
    load leaves them, the heavy fields deferred, built without Model.__init__ (`models_loaded`)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        compiler = connection.ops.compiler("SQLCompiler")(Query(Entry), connection, connection.alias)
        converters = compiler.get_converters([field.get_col(ENTRY_TABLE) for field in _ENTRY_READ_FIELDS])
    if converters:
        rows = list(compiler.apply_converters(rows, converters))
    return models_loaded(Entry, connection.alias, _ENTRY_ATTNAMES, rows)


def path_entries(
    *,
    thread: Thread,
    leaf_id: str | None = None,
    limit: int | None = None,
    before: str | None = None,
    types: Iterable[str] | None = HISTORY_TYPES,
) -> list[Entry]:
    """One branch of the thread, oldest first, ending at `leaf_id` (default: the active leaf).

    1. Start at the leaf (400 naming `leaf` when it is not an entry of this thread).
    2. With `before`, check it lies on that branch (400 naming `before` otherwise) and start at
       its parent instead: the page holds entries older than it.
    3. Walk the parent pointers (`branch_rows_sql`), keeping entries of `types` (None = all),
       stopping after `limit` of them, so a long thread is never read whole.
    4. Return them oldest first.
    """
    start = leaf_id or thread.active_leaf_id
    if leaf_id and not Entry.objects.filter(thread=thread, id=leaf_id).exists():
        raise DomainError("unknown_leaf", "The leaf is not an entry of this thread.", field="leaf")
    if not start:
        return []
    if before:
        parent_id = Entry.objects.filter(thread=thread, id=before).values_list("parent_id", flat=True).first()
        if parent_id is None and not Entry.objects.filter(thread=thread, id=before).exists():
            raise DomainError("unknown_entry", "`before` is not an entry of this thread.", field="before")
        if not _on_branch(thread=thread, leaf_id=start, entry_id=before):
            raise DomainError("not_on_branch", "`before` is not on this branch.", field="before")
        if parent_id is None:
            return []
        start = parent_id
    type_list = _types_list(types)
    params: dict[str, Any] = {"start": start, "thread": thread.pk, "types": type_list, "limit": limit}
    sql = branch_rows_sql(columns=ENTRY_COLUMNS, types=type_list is not None, limit=limit is not None)
    return _entries_read(sql, params)


def path_after(*, thread: Thread, leaf_id: str, after_seq: int, limit: int) -> list[Entry]:
    """The oldest `limit` entries (all types) of the branch ending at `leaf_id` whose seq is above
    `after_seq`, oldest first: the later pages of a branch read from its start or an anchor.

    Seq grows from parent to child on every branch (an entry is written after its parent; imports
    and forks keep that order), so the walk up from the leaf stops at the first entry at or below
    `after_seq` and reads only the part of the branch after it.
    """
    columns = ", ".join(f"e.{c}" for c in ENTRY_COLUMNS)
    sql = branch_sql(
        f"SELECT {columns} FROM branch b JOIN {ENTRY_TABLE} e ON e.id = b.id ORDER BY e.seq LIMIT %(limit)s",
        above_seq="%(after)s",
    )
    params = {"start": leaf_id, "thread": thread.pk, "after": after_seq, "limit": limit}
    return _entries_read(sql, params)


def path_ids(*, thread: Thread, leaf_id: str | None = None) -> set[str]:
    """The ids of every entry on a branch (all types): what a rewind leaves, what a prune or a compaction keeps."""
    start = leaf_id or thread.active_leaf_id
    if not start:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            branch_sql("SELECT id FROM branch"),
            {"start": start, "thread": thread.pk},
        )
        return {row[0] for row in cursor.fetchall()}


# The thread's messages and tool results that the `branch` CTE does not hold.
_OFF_BRANCH = f"""
    SELECT e.id FROM {ENTRY_TABLE} e
     WHERE e.thread_id = %(thread)s AND e.type IN ('message', 'tool_result')
       AND NOT EXISTS (SELECT 1 FROM branch b WHERE b.id = e.id)"""


def off_branch_ids(*, thread: Thread, leaf_id: str | None = None, before_seq: int | None = None) -> list[str]:
    """The messages and tool results of the thread that are not on the branch ending at `leaf_id`
    (the active leaf by default), older than `before_seq` when given: what recall leaves out."""
    start = leaf_id or thread.active_leaf_id
    with connection.cursor() as cursor:
        cursor.execute(
            branch_sql(_OFF_BRANCH + " AND (%(before)s::bigint IS NULL OR e.seq < %(before)s::bigint)"),
            {"start": start, "thread": thread.pk, "before": before_seq},
        )
        return [row[0] for row in cursor.fetchall()]


def off_branch_now(*, thread_pk: int) -> tuple[int | None, list[str]]:
    """(branch_epoch, the messages and tool results off the active branch), read in one statement,
    so the set belongs to that epoch whatever writes land meanwhile. (None, []) without the thread."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH RECURSIVE head AS (
                SELECT active_leaf_id, branch_epoch FROM {Thread._meta.db_table} WHERE id = %(thread)s
            ), {branch_cte(start="(SELECT active_leaf_id FROM head)")}
            SELECT (SELECT branch_epoch FROM head), ARRAY({_OFF_BRANCH})""",
            {"thread": thread_pk},
        )
        epoch, ids = cursor.fetchone()
    return (None, []) if epoch is None else (int(epoch), list(ids))


def tool_call_name_on_branch(*, thread: Thread, leaf_id: str | None, tool_call_id: str) -> str:
    """The name of the tool call `tool_call_id` made on the branch ending at `leaf_id`, or "".

    The walk stops at the nearest entry whose tool calls contain that id (usually the parent).
    """
    if not leaf_id or not tool_call_id:
        return ""
    if encryption_enabled():
        return _tool_call_name_sealed(thread=thread, leaf_id=leaf_id, tool_call_id=tool_call_id)
    with connection.cursor() as cursor:
        cursor.execute(
            branch_sql(
                "SELECT tool_calls FROM branch WHERE tool_calls @> %(probe)s::jsonb LIMIT 1", carry=("tool_calls",)
            ),
            {"start": leaf_id, "thread": thread.pk, "probe": json.dumps([{"id": tool_call_id}])},
        )
        row = cursor.fetchone()
    if row is None:
        return ""
    calls = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    for call in calls or []:
        if isinstance(call, dict) and call.get("id") == tool_call_id:
            return str(call.get("name") or "")
    return ""


# With encryption on, the tool calls of this many nearest entries that made some are opened.
SEALED_TOOL_CALLS_LOOKBACK = 64


def _tool_call_name_sealed(*, thread: Thread, leaf_id: str, tool_call_id: str) -> str:
    """tool_call_name_on_branch over sealed tool calls: the database cannot look inside them, so
    the nearest entries that made calls are read and opened here."""
    with connection.cursor() as cursor:
        cursor.execute(
            branch_sql(
                "SELECT tool_calls::text FROM branch WHERE tool_calls IS NOT NULL LIMIT %(lookback)s",
                carry=("tool_calls",),
            ),
            {"start": leaf_id, "thread": thread.pk, "lookback": SEALED_TOOL_CALLS_LOOKBACK},
        )
        rows = cursor.fetchall()
    for (raw,) in rows:
        calls = json.loads(json_text_open(raw, table=ENTRY_TABLE, column="tool_calls"))
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and call.get("id") == tool_call_id:
                return str(call.get("name") or "")
    return ""


# --- lists -------------------------------------------------------------------------------


# Filters up to this many characters of JSON ride in the cursor; larger ones as a digest.
CURSOR_FILTERS_MAX = 1000


def _filters_digest(filters: dict[str, Any]) -> str:
    raw = json.dumps(filters, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _filters_in_cursor(filters: dict[str, Any]) -> dict[str, Any]:
    small = len(json.dumps(filters, separators=(",", ":"))) <= CURSOR_FILTERS_MAX
    return {"f": filters} if small else {"h": _filters_digest(filters)}


def threads_list(
    *,
    agent: Agent,
    user_id: str | None = None,
    metadata: dict[str, Any] | None = None,
    updated_after: datetime | None = None,
    updated_before: datetime | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page:
    """The agent's threads, most recently updated first, one page at a time.

    Each metadata key given must hold exactly that value, compared by type (`{"n": 1}` does not
    match `{"n": "1"}`, `{"tags": ["a"]}` does not match `["a", "b"]`); JSONB containment first,
    for the GIN index. Paging is by keyset on (updated_at, id), so a page costs the same however
    deep it is; the cursor carries the filters it was made with, so the next page may be asked
    for with the cursor alone (other filters with it are a 400).
    """
    filters: dict[str, Any] = {
        "user_id": user_id,
        "metadata": metadata or None,
        "after": updated_after.isoformat() if updated_after else None,
        "before": updated_before.isoformat() if updated_before else None,
    }
    position: tuple[datetime, int] | None = None
    if cursor:
        values = decode_cursor(cursor, keys=("u", "i"))
        given = any(v is not None for v in filters.values())
        if "h" in values:  # made with filters too large to carry: they must come with it again
            if values["h"] != _filters_digest(filters):
                raise DomainError(
                    "invalid_cursor", "Send the cursor with the filters of the first page.", field="cursor"
                )
        else:
            made_with = values.get("f")
            saved: dict[str, Any] = made_with if isinstance(made_with, dict) else {}
            if given and filters != {k: saved.get(k) for k in filters}:
                raise DomainError("invalid_cursor", "The cursor was made with other filters.", field="cursor")
            filters = {k: saved.get(k) for k in filters}
        if not isinstance(filters["user_id"], str | None) or not isinstance(filters["metadata"], dict | None):
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor")
        # A cursor is client input: what it carries is checked as the same filters would be.
        if unstorable_text_field([filters["user_id"], filters["metadata"]]) is not None:
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor")
        try:
            position = (
                time_in_range(datetime.fromisoformat(str(values["u"])), field="cursor"),
                int(values["i"]),
            )
            after = (
                time_in_range(datetime.fromisoformat(filters["after"]), field="cursor") if filters["after"] else None
            )
            before = (
                time_in_range(datetime.fromisoformat(filters["before"]), field="cursor") if filters["before"] else None
            )
        except (ValueError, TypeError) as exc:
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor") from exc
        user_id, metadata, updated_after, updated_before = filters["user_id"], filters["metadata"], after, before
    threads: QuerySet[Thread] = Thread.objects.filter(agent=agent).select_related("forked_from")
    if user_id is not None:
        threads = threads.filter(user_id=user_id)
    if metadata and encryption_enabled():
        # The metadata is sealed: the rows holding every pair's keyed hash (Thread.metadata_hashes);
        # and a row not sealed yet (written before migration 0050, until `encryption_rotate` seals it
        # and makes its hashes) by its plaintext.
        # Read first (one query through the metadata's GIN index): its RawSQL names the table.
        unsealed = list(
            _metadata_matching(Thread.objects.filter(agent=agent, metadata_hashes__isnull=True), metadata).values_list(
                "pk", flat=True
            )
        )
        # The pairs' hashes under each of the agent's blind keys (one, but while a rotation with new
        # keys walks the rows: a thread not reached yet holds them under the retired one).
        matching = Q(pk__in=unsealed)
        for hashes in pair_hashes_each_key(agent_id=agent.pk, pairs=metadata):
            matching |= Q(metadata_hashes__contains=hashes)
        threads = threads.filter(matching)
    elif metadata:
        threads = _metadata_matching(threads, metadata)
    if updated_after is not None:
        threads = threads.filter(updated_at__gt=updated_after)
    if updated_before is not None:
        threads = threads.filter(updated_at__lt=updated_before)
    if position is not None:
        at, last_id = position
        threads = threads.filter(Q(updated_at__lt=at) | Q(updated_at=at, id__lt=last_id))
    rows = list(threads.order_by("-updated_at", "-id")[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = encode_cursor({"u": last.updated_at.isoformat(), "i": last.pk, **_filters_in_cursor(filters)})
    return Page(results=rows, next_cursor=next_cursor)


def _metadata_matching(threads: QuerySet[Thread], metadata: dict[str, Any]) -> QuerySet[Thread]:
    """The threads whose plaintext metadata holds exactly these top-level values (by type)."""
    threads = threads.filter(metadata__contains=metadata)
    for number, (key, value) in enumerate(metadata.items()):
        name = f"_meta_{number}"
        # The key as text: a KeyTransform would read a key like "2024" as an array index.
        value_of_key = RawSQL("memoryapp_thread.metadata -> %s", (key,), output_field=JSONField())
        threads = threads.alias(**{name: value_of_key}).filter(**{name: value})
    return threads


# `limit=0` ("all", 004) answers at most this many entries, with `next` for the rest.
ALL_ENTRIES_MAX = 10_000


def entries_list(
    *,
    thread: Thread,
    types: Iterable[str] | None = HISTORY_TYPES,
    limit: int = 50,
    cursor: str | None = None,
    before: datetime | None = None,
    after: datetime | None = None,
) -> Page:
    """Entries of every branch (004 getEntries): the newest `limit`, oldest first (`limit` 0: all,
    up to ALL_ENTRIES_MAX at a time),
    within the `before` / `after` time bounds; the next page holds the `limit` before these."""
    entries = Entry.objects.filter(thread=thread).defer(*ENTRY_LIGHT_DEFER)
    type_list = _types_list(types)
    if type_list is not None:
        entries = entries.filter(type__in=type_list)
    if before is not None:
        entries = entries.filter(created_at__lt=before)
    if after is not None:
        entries = entries.filter(created_at__gt=after)
    if cursor:
        values = decode_cursor(cursor, keys=("b",))
        try:
            below_seq = int(values["b"])
        except (ValueError, TypeError) as exc:
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor") from exc
        entries = entries.filter(seq__lt=below_seq)
    limit = limit or ALL_ENTRIES_MAX  # 0 is "all": as many as one answer holds, then `next`
    rows = list(entries.order_by("-seq")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit][::-1]
    return Page(results=rows, next_cursor=encode_cursor({"b": rows[0].seq}) if more else None)


def thread_entries_iter(*, thread: Thread, chunk_size: int = 2000) -> Iterator[Entry]:
    """Every entry of a thread in seq order, read `chunk_size` at a time through a server-side
    cursor (export: a 100,000-entry thread is never held whole)."""
    return Entry.objects.filter(thread=thread).defer(*ENTRY_LIGHT_DEFER).order_by("seq").iterator(chunk_size)
