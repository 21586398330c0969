"""The channel sessions' and the run events' foreign keys cascade in the database itself (ON DELETE
CASCADE), as 0019 made the runs' do: an erasure or a thread delete removes threads (and runs) with
raw bulk deletes, and these rows must go with them instead of failing the constraint at commit.

A migration of its own: Django adds a new table's foreign keys at the end of the migration that
creates it, after any RunSQL in it (0040 had one that did nothing for that reason; it was dropped)."""

from django.db import migrations

from memoryapp.migrations._db_cascade import foreign_keys_rebuilt

TABLES = ("memoryapp_channelsession", "memoryapp_runevent")


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0044_run_ledger")]

    operations = [
        migrations.RunSQL(
            foreign_keys_rebuilt(TABLES, "ON DELETE CASCADE"), reverse_sql=foreign_keys_rebuilt(TABLES, "")
        )
    ]
