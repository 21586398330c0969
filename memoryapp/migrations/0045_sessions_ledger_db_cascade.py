"""The channel sessions' and the run events' foreign keys cascade in the database itself (ON DELETE
CASCADE), as 0019 made the runs' do: an erasure or a thread delete removes threads (and runs) with
raw bulk deletes, and these rows must go with them instead of failing the constraint at commit.

A migration of its own: Django adds a new table's foreign keys at the end of the migration that
creates it, after any RunSQL in it (0040's did nothing for that reason)."""

from django.db import migrations

TABLES = ("memoryapp_channelsession", "memoryapp_runevent")


def _rebuild(on_delete: str) -> str:
    tables = ", ".join(f"'{t}'::regclass" for t in TABLES)
    return f"""
DO $$
DECLARE r record;
BEGIN
  FOR r IN
    SELECT c.conname, c.conrelid::regclass AS tbl, a.attname AS col, c.confrelid::regclass AS ref
      FROM pg_constraint c
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
     WHERE c.contype = 'f' AND c.conrelid IN ({tables})
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
    EXECUTE format(
      'ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (%I) REFERENCES %s (id) {on_delete} DEFERRABLE INITIALLY DEFERRED',
      r.tbl, r.conname, r.col, r.ref
    );
  END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0044_run_ledger")]

    operations = [migrations.RunSQL(_rebuild("ON DELETE CASCADE"), reverse_sql=_rebuild(""))]
