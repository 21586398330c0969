"""Migrations 0063 and 0065 run SQL of their own, not memoryapp.search.space's (a migration must run
the same statements whatever that module becomes); today the two make the same column, trigger and
indexes (0065 replaced 0063's update trigger)."""

from __future__ import annotations

from importlib import import_module

from memoryapp.search.space import embedding_bits_sql, thread_bits_index_sql


def test_the_migration_holds_the_statements_the_service_makes_today() -> None:
    migration = import_module("memoryapp.migrations.0063_entry_embedding_bits")
    trigger = import_module("memoryapp.migrations.0065_entry_bits_trigger_restorable")
    # When this fails, memoryapp.search.space changed the bits' column, trigger or indexes: the
    # databases migrated already hold 0063's and 0065's, so the change needs a migration of its own.
    assert embedding_bits_sql() == [*migration.BITS_SQL[:-2], *trigger.UPDATE_TRIGGER_SQL]
    assert thread_bits_index_sql(concurrently=True) == migration.INDEXES_SQL
    assert not hasattr(migration, "embedding_bits_sql")
