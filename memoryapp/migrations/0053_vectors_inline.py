"""The vectors stay in their row (issue 26): pgvector's type is STORAGE EXTERNAL, so a row over
~2 kB (a 384-dim vector is 1.5 kB) had its vector moved to TOAST, and an exact scan of a thread's
vectors read ~6 TOAST pages per row. MAIN keeps the vector in the row (PostgreSQL moves the other
columns to TOAST first), and a toast_tuple_target of 4080 keeps a short turn's text and
search_vector in the row with it (the keyword channel ranks on search_vector).

Catalog changes only: rows written before keep their storage until rewritten, which
`manage.py vectors_inline` does in batches (docs/operations.md). `vector_columns_resize` (which
changes the column's type, and with it its storage) sets them again (memoryapp.search.space)."""

from django.db import migrations

TABLES = ("memoryapp_entry", "memoryapp_memoryitem", "memoryapp_knowledgechunk")


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0052_thread_key_people"),
    ]

    operations = [
        migrations.RunSQL(
            sql=[
                f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE MAIN, SET (toast_tuple_target = 4080)"
                for table in TABLES
            ],
            reverse_sql=[
                f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE EXTERNAL, RESET (toast_tuple_target)"
                for table in TABLES
            ],
        ),
    ]
