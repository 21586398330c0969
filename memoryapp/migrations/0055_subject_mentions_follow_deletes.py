"""A row of the subject index (`SubjectMention`) goes with the row it names (issue 25 §2).

`row_id` points into one of eleven tables, so no foreign key can cascade: a merge of two entities,
a thread's delete, an erasure's cascades (raw bulk deletes and the database's own ON DELETE rules
among them) left rows naming ids that no longer exist, and the index no longer said what its
rebuild finds. One statement-level trigger per table of the index deletes, in the deleting
transaction, the mentions of the rows a DELETE statement removed (its transition table `gone`),
whoever they name; `subject_mention_row_idx` is what it looks them up by.

A migration's SQL must stay as it is for as long as databases are migrated: a table added to the
index gets its trigger in a migration of its own (tests/forgetting/test_index_follows_entities.py
checks every table of the index has one).
"""

from django.db import migrations, models

# The index's table name (SubjectMention.Table) -> the database table it names rows of.
TABLES = {
    "entry": "memoryapp_entry",
    "thread": "memoryapp_thread",
    "item": "memoryapp_memoryitem",
    "entity": "memoryapp_entity",
    "evidence": "memoryapp_evidence",
    "file_version": "memoryapp_memoryfileversion",
    "relation_evidence": "memoryapp_relationevidence",
    "knowledge_document": "memoryapp_knowledgedocument",
    "run_event": "memoryapp_runevent",
    "thread_run": "memoryapp_threadrun",
    "job_run": "governance_jobrun",
}

FUNCTION = """
CREATE FUNCTION memoryapp_subject_mentions_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memoryapp_subjectmention AS m USING gone AS g
     WHERE m."table" = TG_ARGV[0] AND m.row_id = g.id::text;
    RETURN NULL;
END $$;
"""

TRIGGER = """
CREATE TRIGGER {table}_subject_mentions_gone AFTER DELETE ON {table}
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION memoryapp_subject_mentions_gone('{name}');
"""

UNTRIGGER = "DROP TRIGGER IF EXISTS {table}_subject_mentions_gone ON {table};"


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0054_item_subject_metadata_sealed"),
        ("governance", "0011_pseudonym_keys"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="subjectmention",
            index=models.Index(fields=["table", "row_id"], name="subject_mention_row_idx"),
        ),
        migrations.RunSQL(
            FUNCTION + "".join(TRIGGER.format(table=table, name=name) for name, table in TABLES.items()),
            reverse_sql="".join(UNTRIGGER.format(table=table) for table in TABLES.values())
            + "DROP FUNCTION IF EXISTS memoryapp_subject_mentions_gone();",
        ),
    ]
