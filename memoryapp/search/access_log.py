"""The access log: which memory items and entries each context build and search sent to an agent
(ids only), with the agent, the thread, the person and the time.

Writing it costs one statement per request: the row is inserted and the items' `times_retrieved`
/ `last_retrieved_at` (004 `noteRetrieved`) moved on in the same statement (a data-modifying
CTE), so the count and the log never disagree. Retention (`access_log_prune`) and erasure
(`access_log_forget_person`) are here too; the statements are built with psycopg.sql, in this
module only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from psycopg import sql

from memoryapp.models import AccessLog, MemoryItem, Thread

logger = logging.getLogger(__name__)

_RECORD = sql.SQL(
    """
    WITH logged AS (
        INSERT INTO {log} (agent_id, thread_id, user_id, source, at, item_ids, entry_ids)
        VALUES (%(agent)s, %(thread)s, %(user)s, %(source)s, %(at)s, %(items)s::varchar[], %(entries)s::varchar[])
        RETURNING id
    )
    UPDATE {items} SET times_retrieved = times_retrieved + 1, last_retrieved_at = %(at)s
     WHERE agent_id = %(agent)s AND id = ANY(%(items)s::varchar[])
    """
)


def _unique(ids: Sequence[str]) -> list[str]:
    return [i for i in dict.fromkeys(ids) if i]


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
    statement = _RECORD.format(
        log=sql.Identifier(AccessLog._meta.db_table), items=sql.Identifier(MemoryItem._meta.db_table)
    )
    params = {
        "agent": agent_id,
        "thread": thread.pk if thread is not None else None,
        "user": user_id or (thread.user_id if thread is not None else ""),
        "source": source,
        "at": at or timezone.now(),
        "items": items,
        "entries": entries,
    }
    outermost = not connection.in_atomic_block
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            if outermost:
                # Its own transaction: the commit need not wait for the WAL to reach the disk
                # (the few rows a crash of the database server could lose are a log's, not data).
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
            cursor.execute(statement, params)
    except DatabaseError:
        logger.exception("the access log of a %s could not be written", source)
        return False
    return True


def item_accesses(*, item: MemoryItem, limit: int = 50) -> QuerySet[AccessLog]:
    """The newest requests that sent this item, with their threads (the item's admin page)."""
    return (
        AccessLog.objects.filter(agent_id=item.agent_id, item_ids__contains=[item.pk])
        .select_related("thread")
        .order_by("-at")[:limit]
    )


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
