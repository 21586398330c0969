"""The base of every management command of the project: it says what to do on a database that
is not migrated yet, instead of dying in a traceback ("relation memoryapp_agent does not exist")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor


def database_ready_check(*, using: str = DEFAULT_DB_ALIAS) -> None:
    """A CommandError (a message, exit status 1, no traceback) unless the database is reachable
    and every migration is applied."""
    connection = connections[using]
    try:
        executor = MigrationExecutor(connection)
        unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CommandError(
            f"The database cannot be reached ({reason}). Check DATABASE_URL, or run `make run`."
        ) from exc
    if unapplied:
        raise CommandError(
            f"The database is not migrated yet ({len(unapplied)} migrations to apply): run `make run` "
            "(it migrates first) or `python manage.py migrate`, then this command again."
        )


class ProjectCommand(BaseCommand):
    """Checks the database (`database_ready_check`) before the command's own work, unless the
    command says it never touches one (`uses_database = False`, e.g. checking a receipt offline)."""

    uses_database = True

    def execute(self, *args: Any, **options: Any) -> str | None:
        if self.uses_database:
            database_ready_check(using=options.get("database") or DEFAULT_DB_ALIAS)
        return super().execute(*args, **options)
