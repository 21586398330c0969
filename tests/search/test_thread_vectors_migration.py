"""Migration 0059 builds the thread index (issue 26) on a table that may hold millions of turns:
the service keeps reading and writing the entries while it does (memoryapp.search.space)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from memoryapp.search.space import THREAD_VECTORS_INDEX
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded


def _locks_free(conninfo: dict[str, Any]) -> dict[str, bool]:
    """Whether a reader and a writer of the entries get their table lock at once (NOWAIT)."""
    free = {}
    with psycopg.connect(**conninfo) as other:
        for mode in ("ACCESS SHARE", "ROW EXCLUSIVE"):
            try:
                with other.transaction():
                    other.execute(f"LOCK TABLE memoryapp_entry IN {mode} MODE NOWAIT")
                free[mode] = True
            except psycopg.errors.LockNotAvailable:
                free[mode] = False
    return free


def _while_a_writer_is_in_flight(pid: int, build: Callable[[], Any]) -> dict[str, Any]:
    """Run the index's build while a write of the entries is in flight (its transaction open): the
    build waits for it, and meanwhile a reader and a writer try their locks."""
    conninfo = connection.get_connection_params()
    seen: dict[str, Any] = {}
    writer = psycopg.connect(**conninfo)
    try:
        writer.execute("SET lock_timeout = '5s'")
        try:
            writer.execute("LOCK TABLE memoryapp_entry IN ROW EXCLUSIVE MODE")
        except psycopg.errors.LockNotAvailable:
            seen["writer before the build"] = "blocked"
            writer.rollback()
            return {**seen, "built": build()}

        def meanwhile() -> None:
            with psycopg.connect(**conninfo, autocommit=True) as watcher:
                for _ in range(600):
                    row = watcher.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
                    ).fetchone()
                    if row and row[0] == "Lock":
                        seen["during the build"] = _locks_free(conninfo)
                        break
                    time.sleep(0.1)
            writer.commit()  # the write in flight ends: the build goes on

        watching = threading.Thread(target=meanwhile)
        watching.start()
        try:
            seen["built"] = build()
        finally:
            watching.join()
    finally:
        writer.close()
    return seen


@pytest.mark.django_db(transaction=True)
def test_migration_0059_leaves_the_entries_read_and_written_while_it_builds(alice: Any) -> None:
    ThreadFactory(agent=alice.agent, external_id="t-1", turns=[("user", f"turn {i}") for i in range(20)])
    embedded(alice.agent)
    call_command("migrate", "memoryapp", "0058", verbosity=0)  # a database from before 0059
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        seen: dict[str, Any] = {}

        def building(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
            if sql.lstrip().upper().startswith("CREATE") and THREAD_VECTORS_INDEX in sql:
                seen.update(_while_a_writer_is_in_flight(pid, lambda: execute(sql, params, many, context)))
                return seen.pop("built")
            return execute(sql, params, many, context)

        with connection.execute_wrapper(building):
            call_command("migrate", "memoryapp", "0059", verbosity=0)
    finally:
        call_command("migrate", verbosity=0)
    # A write in flight when the build starts is waited for, not blocked; reads and other writes
    # go on during the build (before: ACCESS EXCLUSIVE, from the storage change, for all of it).
    assert seen == {"during the build": {"ACCESS SHARE": True, "ROW EXCLUSIVE": True}}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            [THREAD_VECTORS_INDEX],
        )
        assert cursor.fetchall() == [(True,)]
        cursor.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'memoryapp_entry'::regclass AND attname = 'embedding'"
        )
        assert cursor.fetchone()[0] == "p"
