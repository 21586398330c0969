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

# The statements as they were when this migration was written, copied here rather than imported
# from memoryapp.search.space: a migration runs the same SQL whatever that module becomes (a later
# column in its index or trigger would be named here before the migration that adds it).
QUANTIZED_COLUMN = "embedding_bits"
THREAD_BITS_INDEX = "entry_thread_bits_idx"
BITS_PENDING_INDEX = "entry_bits_pending_idx"
BITS_TRIGGER_FUNCTION = "memoryapp_entry_embedding_bits"

BITS_SQL = [
    f"ALTER TABLE memoryapp_entry ADD COLUMN IF NOT EXISTS {QUANTIZED_COLUMN} bit varying",
    f"""CREATE OR REPLACE FUNCTION {BITS_TRIGGER_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                NEW.{QUANTIZED_COLUMN} := binary_quantize(NEW.embedding)::bit varying;
                RETURN NEW;
            END $$""",
    "DROP TRIGGER IF EXISTS entry_embedding_bits_insert ON memoryapp_entry",
    "CREATE TRIGGER entry_embedding_bits_insert BEFORE INSERT ON memoryapp_entry FOR EACH ROW"
    f" WHEN (NEW.embedding IS NOT NULL OR NEW.{QUANTIZED_COLUMN} IS NOT NULL)"
    f" EXECUTE FUNCTION {BITS_TRIGGER_FUNCTION}()",
    "DROP TRIGGER IF EXISTS entry_embedding_bits_update ON memoryapp_entry",
    "CREATE TRIGGER entry_embedding_bits_update BEFORE UPDATE OF embedding, embedding_bits ON memoryapp_entry"
    " FOR EACH ROW WHEN (NEW.embedding IS DISTINCT FROM OLD.embedding"
    f" OR NEW.{QUANTIZED_COLUMN} IS DISTINCT FROM OLD.{QUANTIZED_COLUMN})"
    f" EXECUTE FUNCTION {BITS_TRIGGER_FUNCTION}()",
]

INDEXES_SQL = [
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {THREAD_BITS_INDEX} ON memoryapp_entry (thread_id, seq)"
    f" INCLUDE (agent_id, id, created_at, {QUANTIZED_COLUMN})"
    " WHERE type IN ('message', 'tool_result') AND redacted_at IS NULL AND held_at IS NULL"
    f" AND {QUANTIZED_COLUMN} IS NOT NULL",
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {BITS_PENDING_INDEX} ON memoryapp_entry (thread_id)"
    f" WHERE embedding IS NOT NULL AND {QUANTIZED_COLUMN} IS NULL",
]


def add_bits(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for statement in BITS_SQL:
            cursor.execute(statement)
        for index in (THREAD_BITS_INDEX, BITS_PENDING_INDEX):
            cursor.execute(
                "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname = %s AND NOT i.indisvalid",
                [index],
            )
            if cursor.fetchone():
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
        for statement in INDEXES_SQL:
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
