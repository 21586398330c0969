"""The SQL that rebuilds every foreign key of some tables with a database-level ON DELETE rule
(0019, 0045): an erasure deletes threads and agents with raw bulk deletes (`QuerySet._raw_delete`,
plain SQL), and the rows that point at them must go with them instead of failing the constraint at
commit. Django's own cascade still runs first and finds nothing left to do twice.

A migration's step must give the same SQL for as long as databases are migrated: this module stays
as it is (a new rule is a new function). Its name starts with `_`, so the migration loader does not
take it for a migration.

Run it in a migration after the one that creates the tables: Django adds a new table's foreign keys
at the end of the migration that creates it, after any RunSQL in it.
"""

from __future__ import annotations


def foreign_keys_rebuilt(tables: tuple[str, ...], on_delete: str) -> str:
    """A DO block that drops and re-adds each foreign key of `tables` (to the referenced table's
    `id`) with `on_delete` (`"ON DELETE CASCADE"`, or `""` to undo), deferrable as Django makes them."""
    names = ", ".join(f"'{t}'::regclass" for t in tables)
    return f"""
DO $$
DECLARE r record;
BEGIN
  FOR r IN
    SELECT c.conname, c.conrelid::regclass AS tbl, a.attname AS col, c.confrelid::regclass AS ref
      FROM pg_constraint c
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
     WHERE c.contype = 'f' AND c.conrelid IN ({names})
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
    EXECUTE format(
      'ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (%I) REFERENCES %s (id) {on_delete} DEFERRABLE INITIALLY DEFERRED',
      r.tbl, r.conname, r.col, r.ref
    );
  END LOOP;
END $$;
"""
