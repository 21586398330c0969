"""A compact copy of each entry's vector, its sign bits (issue 26, memoryapp.search.space.QUANTIZED_COLUMN):
a thread's nearest turns are found among its bits, then the best candidates by their vectors
(memoryapp.search.vector), instead of every vector of the thread compared.

What it costs at migrate time: the column is nullable without a default, so adding it changes the
catalog only (no rewrite; a moment's ACCESS EXCLUSIVE lock, as any ALTER TABLE). The trigger fills
the bits of every vector written from then on. The thread index of the bits is built CONCURRENTLY
and is empty (no row has bits yet); the index of the rows without bits (the rows embedded before,
a few dozen bytes each) is built CONCURRENTLY too, reading each embedded entry once while the
service reads and writes them. Rows embedded before keep no bits until `manage.py vectors_quantize`
(batches, safe to stop; each row a new version): until then the search compares them by their
vectors, as before. Not atomic, for the concurrent builds; a build that failed leaves an invalid
index, dropped when the migration runs again."""

from django.db import migrations

from memoryapp.search.space import (
    BITS_PENDING_INDEX,
    BITS_TRIGGER_FUNCTION,
    QUANTIZED_COLUMN,
    THREAD_BITS_INDEX,
    embedding_bits_sql,
    thread_bits_index_sql,
)


def add_bits(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for statement in embedding_bits_sql():
            cursor.execute(statement)
        for index in (THREAD_BITS_INDEX, BITS_PENDING_INDEX):
            cursor.execute(
                "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname = %s AND NOT i.indisvalid",
                [index],
            )
            if cursor.fetchone():
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
        for statement in thread_bits_index_sql(concurrently=True):
            cursor.execute(statement)


def drop_bits(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for index in (THREAD_BITS_INDEX, BITS_PENDING_INDEX):
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
        cursor.execute("DROP TRIGGER IF EXISTS entry_embedding_bits_insert ON memoryapp_entry")
        cursor.execute("DROP TRIGGER IF EXISTS entry_embedding_bits_update ON memoryapp_entry")
        cursor.execute(f"DROP FUNCTION IF EXISTS {BITS_TRIGGER_FUNCTION}()")
        cursor.execute(f"ALTER TABLE memoryapp_entry DROP COLUMN IF EXISTS {QUANTIZED_COLUMN}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("memoryapp", "0062_erasure_mark"),
    ]

    operations = [
        migrations.RunPython(add_bits, drop_bits),
    ]
