"""The access log's and the runs' foreign keys cascade in the database itself (ON DELETE CASCADE),
not only in Django's ORM: an erasure that deletes threads (or agents) with raw bulk deletes
(`QuerySet._raw_delete`, plain SQL) takes their access rows and runs with them instead of
failing on the constraint at commit. The ORM's own cascade still runs first and finds nothing left
to do twice."""

from django.db import migrations

TABLES = ("memoryapp_accesslog", "memoryapp_threadrun")


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
    dependencies = [("memoryapp", "0018_auto_compaction")]

    operations = [migrations.RunSQL(_rebuild("ON DELETE CASCADE"), reverse_sql=_rebuild(""))]
