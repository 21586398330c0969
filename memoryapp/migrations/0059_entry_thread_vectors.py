"""A thread's vectors in an index of their own (issue 26, memoryapp.search.space.THREAD_VECTORS_INDEX):
the exact read of a thread's nearest turns (memoryapp.search.vector) is an index-only scan of it
instead of a heap visit per turn. The entries' vector column is stored PLAIN with it, so that the
index's copies are never compressed (an index column takes its table column's storage).

At the column's dimension as the database has it: above THREAD_VECTORS_MAX_DIMENSIONS (a B-tree
row holds ~2.7 kB) there is no index and the storage stays MAIN. `vector_columns_resize` (a new
dimension) makes it again. Building it reads every embedded entry once; its rows are ~1.6 kB a turn
at 384 dimensions (the table's vectors again, ~1 GB for 600,000 turns).

Not atomic: in one transaction the storage change's ACCESS EXCLUSIVE lock would be held through the
whole build, every read and write of the entries waiting for it. The storage is changed on its own
(a catalog change), then the index built CONCURRENTLY: the service reads and writes meanwhile. A
build that failed leaves an invalid index, dropped when the migration runs again."""

from django.db import migrations

from memoryapp.search.space import TOAST_TUPLE_TARGET, THREAD_VECTORS_INDEX, thread_vectors_index_sql


def _dimensions(connection) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.atttypmod FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relname = 'memoryapp_entry' AND a.attname = 'embedding' AND NOT a.attisdropped"
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] and row[0] > 0 else None


def _invalid_index_drop(cursor) -> None:
    """A concurrent build that failed (or was stopped) leaves its index invalid, and IF NOT EXISTS
    would keep it so: dropped, so that running the migration again builds it."""
    cursor.execute(
        "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s AND NOT i.indisvalid",
        [THREAD_VECTORS_INDEX],
    )
    if cursor.fetchone():
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {THREAD_VECTORS_INDEX}")


def index_threads(apps, schema_editor):
    dimensions = _dimensions(schema_editor.connection)
    if dimensions is None:
        return
    with schema_editor.connection.cursor() as cursor:
        _invalid_index_drop(cursor)
        for statement in thread_vectors_index_sql(dimensions, concurrently=True):
            cursor.execute(statement)


def unindex_threads(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {THREAD_VECTORS_INDEX}")
        cursor.execute(
            "ALTER TABLE memoryapp_entry ALTER COLUMN embedding SET STORAGE MAIN,"
            f" SET (toast_tuple_target = {TOAST_TUPLE_TARGET})"
        )


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction (the module's docstring)

    dependencies = [
        ("memoryapp", "0058_person_erasing_mode"),
    ]

    operations = [
        migrations.RunPython(index_threads, unindex_threads),
    ]
