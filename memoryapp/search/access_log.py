"""The access log: which memory items and entries each context build and search sent to an agent
(ids only), with the agent, the thread, the person and the time.

Writing it costs one statement per request: the row is inserted and the items' `times_retrieved`
/ `last_retrieved_at` (004 `noteRetrieved`) moved on in the same statement (a data-modifying
CTE). That statement never waits for an item while it holds another lock, so it is never one end
of a deadlock (which would roll its log row back with it): it first takes the key locks its row's
foreign keys need (the agent's, the thread's; an extraction holds its thread FOR UPDATE while it
writes items), then counts the items no other transaction holds (FOR UPDATE SKIP LOCKED, in id
order); an item another transaction held is counted after, one row per statement, each waiting
for that one lock only. That holds when it runs outside a transaction, as the search and context
views call it: each statement commits before the next. Inside a caller's transaction the rows it
counted stay locked while it waits for a skipped one, and a writer holding that one and wanting a
counted one deadlocks with it (the log's savepoint usually loses: that item's count is lost).
Retention (`access_log_prune`), erasure
(`access_log_forget_person`) and the export of a person (`access_log_of_person`) are here too; their
SQL is built in this module only (psycopg.sql for statements, RawSQL for a queryset's expressions).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import DatabaseError, connection, transaction
from django.db.models import BooleanField, Case, CharField, F, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone
from psycopg import sql

from memoryapp.models import AccessLog, Agent, MemoryItem, Thread

logger = logging.getLogger(__name__)

_RECORD = sql.SQL(
    """
    WITH logged AS (
        INSERT INTO {log} (agent_id, thread_id, user_id, source, at, item_ids, entry_ids)
        VALUES (%(agent)s, %(thread)s, %(user)s, %(source)s, %(at)s, %(items)s::text::varchar[], %(entries)s::text::varchar[])
        RETURNING id
    ),
    agent_key AS (SELECT id FROM {agents} WHERE id = %(agent)s FOR KEY SHARE),
    thread_key AS (SELECT id FROM {threads} WHERE id = %(thread)s FOR KEY SHARE),
    free AS (
        SELECT id FROM {items}
         WHERE agent_id = %(agent)s AND id = ANY(%(items)s::text::varchar[])
           AND (SELECT count(*) FROM agent_key) + (SELECT count(*) FROM thread_key) >= 0
         ORDER BY id
           FOR UPDATE SKIP LOCKED
    )
    UPDATE {items} AS item SET times_retrieved = item.times_retrieved + 1, last_retrieved_at = %(at)s
      FROM free WHERE item.id = free.id
    RETURNING item.id
    """
)
# The key locks come first (the `free` CTE's one-time filter reads them before it locks an item):
# waiting for a thread an extraction holds, the statement holds no item that extraction may want.

# An item the statement skipped (another transaction held it): counted alone, waiting for that lock.
_COUNT_ONE = sql.SQL(
    """
    UPDATE {items} SET times_retrieved = times_retrieved + 1, last_retrieved_at = %(at)s
     WHERE agent_id = %(agent)s AND id = %(item)s
    """
)
# Outside a caller's transaction a statement runs as its own, committed without waiting for the WAL
# to reach the disk: the few rows a crash of the database server could lose are a log's, not data.
# The setting and the statement go as one string, which PostgreSQL runs as one transaction (Django's
# client-side binding sends it as one simple query): one round trip, not a BEGIN, a SET, the
# statement and a COMMIT.
_ASYNC_COMMIT = sql.SQL("SET LOCAL synchronous_commit TO OFF; ")


def _unique(ids: Sequence[str]) -> list[str]:
    return [i for i in dict.fromkeys(ids) if i]


def array_literal(ids: Sequence[str]) -> str:
    """The PostgreSQL array literal of these strings ('{"a","b"}'), sent as one text parameter and cast
    in the statement: psycopg adapts a list element by element (a context build logs some hundred
    entry ids: ~5% of its CPU went to that), a string in one go. Each element is quoted, its
    backslashes and double quotes escaped, as array input reads them."""
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in ids) + "}"


def access_log_record(
    *,
    agent_id: int,
    thread: Thread | None,
    user_id: str = "",
    source: str,
    item_ids: Sequence[str] = (),
    entry_ids: Sequence[str] = (),
    at: datetime | None = None,
) -> bool:
    """Log what one request sent to the agent and count the items as retrieved, in one statement.

    Best effort: a failure is logged and answers False, never fails the request that sent the
    memory (its own savepoint, so a caller's transaction goes on)."""
    items, entries = _unique(item_ids), _unique(entry_ids)
    tables = {
        "log": sql.Identifier(AccessLog._meta.db_table),
        "items": sql.Identifier(MemoryItem._meta.db_table),
        "agents": sql.Identifier(Agent._meta.db_table),
        "threads": sql.Identifier(Thread._meta.db_table),
    }
    params = {
        "agent": agent_id,
        "thread": thread.pk if thread is not None else None,
        "user": user_id or (thread.user_id if thread is not None else ""),
        "source": source,
        "at": at or timezone.now(),
        "items": array_literal(items),
        "entries": array_literal(entries),
    }
    try:
        counted = _run(_RECORD.format(**tables), params, returns=True)
        # Rarely any: an item another request was counting, or one a writer holds (then this waits
        # for that writer, holding nothing it could want). An item gone since answers no row.
        for item in sorted(set(items) - counted):
            _run(_COUNT_ONE.format(**tables), {"agent": agent_id, "item": item, "at": params["at"]})
    except DatabaseError:
        logger.exception("the access log of a %s could not be written", source)
        return False
    return True


def _run(statement: sql.Composable, params: dict[str, Any], *, returns: bool = False) -> set[str]:
    """Run one statement: as its own transaction committed asynchronously, or in a savepoint of the
    caller's transaction (a failure leaves the caller's transaction usable). Answers the ids it
    returned."""
    if not connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute(_ASYNC_COMMIT + statement, params)
            if returns and cursor.nextset():
                return {row[0] for row in cursor.fetchall()}
            return set()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
        return {row[0] for row in cursor.fetchall()} if returns else set()


def item_accesses(*, item: MemoryItem, limit: int = 50, before: int | None = None) -> QuerySet[AccessLog]:
    """The newest requests that sent this item, with their threads (the item's admin page), newest
    first; `before`: the id of a row, for the page of those older than it (a keyset: no OFFSET)."""
    rows = AccessLog.objects.filter(agent_id=item.agent_id, item_ids__contains=[item.pk])
    if before is not None:
        after = rows.filter(pk=before).values_list("at", flat=True).first()
        if after is not None:
            rows = rows.filter(Q(at__lt=after) | Q(at=after, pk__lt=before))
    return rows.select_related("thread").order_by("-at", "-pk")[:limit]


def access_log_prune(*, older_than: datetime) -> int:
    """Delete the rows logged before `older_than` (retention); answers how many went."""
    deleted, _ = AccessLog.objects.filter(at__lt=older_than).delete()
    return deleted


_FORGET_IDS = sql.SQL(
    """
    UPDATE {log}
       SET item_ids = ARRAY(SELECT i FROM unnest(item_ids) AS i WHERE i <> ALL(%(items)s::varchar[])),
           entry_ids = ARRAY(SELECT e FROM unnest(entry_ids) AS e WHERE e <> ALL(%(entries)s::varchar[]))
     WHERE agent_id = %(agent)s AND (item_ids && %(items)s::varchar[] OR entry_ids && %(entries)s::varchar[])
    """
)


@transaction.atomic
def access_log_forget_person(
    *, agent_id: int, user_id: str, item_ids: Sequence[str] = (), entry_ids: Sequence[str] = ()
) -> dict[str, int]:
    """The access log's part of erasing a person of an agent:

    1. the rows of requests about them (their threads' context builds, searches for their user id)
       are deleted, and so are the rows of their threads (whatever user id the row kept);
    2. their items and entries (`item_ids`, `entry_ids`: what the erasure removes) are taken out of
       the rows of other people's requests that sent them, so no id of theirs stays behind.

    Idempotent: run again it finds nothing. Answers the counts, for the erasure's report.
    """
    if not user_id:
        raise ValueError("access_log_forget_person needs the person's user_id")
    threads = Thread.objects.filter(agent_id=agent_id, user_id=user_id).values("pk")
    deleted, _ = AccessLog.objects.filter(agent_id=agent_id, user_id=user_id).delete()
    more, _ = AccessLog.objects.filter(agent_id=agent_id, thread__in=threads).delete()
    items, entries = _unique(item_ids), _unique(entry_ids)
    stripped = 0
    if items or entries:
        statement = _FORGET_IDS.format(log=sql.Identifier(AccessLog._meta.db_table))
        with connection.cursor() as cursor:
            cursor.execute(statement, {"agent": agent_id, "items": items, "entries": entries})
            stripped = cursor.rowcount
    return {"access_rows_deleted": deleted + more, "access_rows_stripped": stripped}


def _ids_union(selections: Sequence[QuerySet[Any]]) -> tuple[str, tuple[Any, ...]]:
    """One SQL UNION of the id columns of these selections (each a `values("id")` queryset)."""
    parts = [selection.query.sql_with_params() for selection in selections]
    return " UNION ".join(f"({sql})" for sql, _ in parts), tuple(p for _, params in parts for p in params)


# work_mem of a read of access_log_of_person: the hashes of the person's ids fit (some millions).
PERSON_READ_WORK_MEM = "256MB"


@contextmanager
def access_log_person_reading() -> Iterator[None]:
    """A transaction in which access_log_of_person's hashes fit in work_mem (SET LOCAL: this
    transaction only); its queryset's server-side cursor lives inside it."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('work_mem', %s, true)", [PERSON_READ_WORK_MEM])
        yield


def access_log_of_person(
    *,
    agent_ids: Sequence[int],
    user_id: str,
    item_ids: Sequence[QuerySet[Any]],
    entry_ids: Sequence[QuerySet[Any]],
) -> QuerySet[AccessLog]:
    """What these agents were sent about a person: an export of the person reads it.

    The rows of requests about them (their user id, or one of their threads) and of the requests of
    others that sent one of their items or entries (`item_ids`, `entry_ids`: selections of the ids
    that are theirs, `values("id")` querysets, unioned). Each row is annotated with `about_them`,
    `their_item_ids` and `their_entry_ids` (the ids of the row that are theirs: the ids of other
    people's memory that went with them stay out) and `thread_external_id`.

    The ids are matched in the database: each selection is read once into a hash, and every id of
    every row of these agents is probed in it, so the cost is linear in the agents' log (never rows
    times the person's ids, as `&&` against an array of them is without its index) and a person
    with many entries is never a list in memory. PostgreSQL plans the hash only when it fits in
    work_mem: read it inside `access_log_person_reading()`, which gives it room (150,000 entries and
    30,000 items: 1.3 s with it, minutes without).
    """
    if not user_id:
        raise ValueError("access_log_of_person needs the person's user_id")
    table = connection.ops.quote_name(AccessLog._meta.db_table)
    items_sql, items_params = _ids_union(item_ids)
    entries_sql, entries_params = _ids_union(entry_ids)
    threads = Thread.objects.filter(agent_id__in=list(agent_ids), user_id=user_id).values("pk")
    about_them = Q(user_id=user_id) | Q(thread__in=threads)

    def named(column: str, union: str) -> str:
        # `(... IN (...)) IS TRUE`, not a bare IN: PostgreSQL would make a bare one a semi-join run
        # again for every row; wrapped, it is a hashed subplan, its hash built once for the query.
        return f"FROM unnest({table}.{column}) AS named WHERE (named IN ({union})) IS TRUE"

    def theirs(column: str, union: str, params: tuple[Any, ...]) -> RawSQL:
        return RawSQL(
            f"ARRAY(SELECT named {named(column, union)})", params, output_field=ArrayField(CharField(max_length=40))
        )

    sends_theirs = RawSQL(
        f"EXISTS(SELECT 1 {named('item_ids', items_sql)}) OR EXISTS(SELECT 1 {named('entry_ids', entries_sql)})",
        (*items_params, *entries_params),
        output_field=BooleanField(),
    )

    return (
        AccessLog.objects.filter(agent_id__in=list(agent_ids))
        .annotate(
            # A CASE, not the bare condition: a row of no thread would answer NULL to `thread IN (...)`.
            about_them=Case(When(about_them, then=Value(True)), default=Value(False), output_field=BooleanField()),
            their_item_ids=theirs("item_ids", items_sql, items_params),
            their_entry_ids=theirs("entry_ids", entries_sql, entries_params),
            thread_external_id=F("thread__external_id"),
        )
        .alias(sends_theirs=sends_theirs)
        .filter(Q(about_them=True) | Q(sends_theirs=True))
    )
