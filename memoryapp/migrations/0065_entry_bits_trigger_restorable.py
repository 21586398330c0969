"""The bits' update trigger (0063) without its WHEN clause, which compared the old and new vectors
with `IS DISTINCT FROM`: pg_dump writes that comparison without the schema of pgvector's `=`
operator, and restoring the dump (psql runs it with an empty search_path) failed on the trigger
(`operator does not exist: public.vector = public.vector`). The trigger now fires on every UPDATE
naming the vector or its bits and makes the bits again (48 bytes from the vector: what an update
that set the same vector cost nothing before costs a few microseconds now). The statements are this
migration's own (memoryapp.search.space makes the same today: tests/search/test_bits_migration_frozen.py)."""

from django.db import migrations

UPDATE_TRIGGER_SQL = [
    "DROP TRIGGER IF EXISTS entry_embedding_bits_update ON memoryapp_entry",
    "CREATE TRIGGER entry_embedding_bits_update BEFORE UPDATE OF embedding, embedding_bits ON memoryapp_entry"
    " FOR EACH ROW EXECUTE FUNCTION memoryapp_entry_embedding_bits()",
]

BEFORE_SQL = [
    "DROP TRIGGER IF EXISTS entry_embedding_bits_update ON memoryapp_entry",
    "CREATE TRIGGER entry_embedding_bits_update BEFORE UPDATE OF embedding, embedding_bits ON memoryapp_entry"
    " FOR EACH ROW WHEN (NEW.embedding IS DISTINCT FROM OLD.embedding"
    " OR NEW.embedding_bits IS DISTINCT FROM OLD.embedding_bits)"
    " EXECUTE FUNCTION memoryapp_entry_embedding_bits()",
]


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0064_erasure_mark_choices"),
    ]

    operations = [
        migrations.RunSQL(UPDATE_TRIGGER_SQL, BEFORE_SQL),
    ]
