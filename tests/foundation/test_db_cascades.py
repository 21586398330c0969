"""The foreign keys that cascade in the database itself (ON DELETE CASCADE, rebuilt by
memoryapp/migrations/_db_cascade.py in 0019 and 0045): an erasure's raw bulk deletes of threads and
agents take these rows with them. The migrations share one helper; this checks what it left."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

pytestmark = pytest.mark.django_db

CASCADING = ("memoryapp_accesslog", "memoryapp_threadrun", "memoryapp_channelsession", "memoryapp_runevent")


def test_the_rebuilt_foreign_keys_cascade_in_the_database_and_stay_deferrable() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, confdeltype, condeferrable, condeferred FROM pg_constraint"
            " WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s)",
            [list(CASCADING)],
        )
        keys = cursor.fetchall()
    assert {table for table, *_ in keys} == set(CASCADING)
    assert [k for k in keys if k[2:] != ("c", True, True)] == []


def test_the_shared_helper_is_not_taken_for_a_migration() -> None:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    names = {name for app, name in loader.disk_migrations if app == "memoryapp"}
    assert "0045_sessions_ledger_db_cascade" in names and not any(n.startswith("_") for n in names)
