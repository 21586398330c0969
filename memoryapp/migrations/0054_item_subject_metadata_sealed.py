"""A memory item's subject and metadata are sealed at rest when encryption is on (issue 25 §6), under
the item's key as its value is: what SQL read of them moves to columns of their own, filled here
from the rows written before (their subject and metadata are plaintext): `subject_hash` (what the
slot's lookups compare: the subject itself until `encryption_rotate` hashes it under the agent's
blind key), `end_given` (`metadata.valid_until` is set) and `stale_by` (`metadata.stale_because.by`).
The values themselves are sealed by `encryption_rotate` (a row in plaintext is sealed by its next
run), as for a database written before encryption was turned on; until then a row is found by its
plaintext subject (`equality_values`).

A generated column's expression cannot be altered, and a column it reads cannot change type: the
full-text column is dropped (with its index) and made again after, the subject's part now empty for
a sealed subject (its words are in `keyword_hashes` then)."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import governance.crypto.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0053_vectors_inline"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="memoryitem", name="item_slot_idx"),
        migrations.RemoveIndex(model_name="memoryitem", name="item_search_gin"),
        migrations.RemoveField(model_name="memoryitem", name="search_vector"),
        migrations.AddField(
            model_name="memoryitem",
            name="end_given",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="memoryitem",
            name="stale_by",
            field=models.CharField(blank=True, db_default="", default="", editable=False, max_length=20),
        ),
        migrations.AddField(
            model_name="memoryitem",
            name="subject_hash",
            field=governance.crypto.fields.ValueHashField(
                blank=True, db_default="", default="", max_length=300, source="subject"
            ),
        ),
        migrations.RunSQL(
            """
            UPDATE memoryapp_memoryitem SET
              subject_hash = subject,
              end_given = coalesce(metadata ->> 'valid_until', '') <> '',
              stale_by = CASE WHEN jsonb_typeof(metadata -> 'stale_because') = 'object'
                              THEN left(coalesce(metadata -> 'stale_because' ->> 'by', ''), 20) ELSE '' END
            WHERE subject <> '' OR metadata <> '{}'::jsonb
            """,
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="memoryitem",
            name="keyword_hashes",
            field=governance.crypto.fields.BlindIndexField(
                also=("subject",), base_field=models.BigIntegerField(), blank=True, null=True, size=None, source="value"
            ),
        ),
        migrations.AlterField(
            model_name="memoryitem",
            name="metadata",
            field=governance.crypto.fields.SealedMetadataField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="memoryitem",
            name="subject",
            field=governance.crypto.fields.SealedTextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="memoryitem",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.contrib.postgres.search.SearchVector(
                    models.Case(
                        models.When(subject__startswith="enc:v1:", then=models.Value("")),
                        default=models.F("subject"),
                        output_field=models.TextField(),
                    ),
                    "attribute",
                    models.Case(
                        models.When(then=models.Value(""), value__startswith="enc:v1:"),
                        default=models.F("value"),
                        output_field=models.TextField(),
                    ),
                    config="english",
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="memoryitem",
            index=django.contrib.postgres.indexes.GinIndex(fields=["search_vector"], name="item_search_gin"),
        ),
        migrations.AddIndex(
            model_name="memoryitem",
            index=models.Index(
                fields=["agent", "user_id", "project_id", "thread_id", "attribute", "subject_hash", "valid_from"],
                name="item_slot_hash_idx",
            ),
        ),
    ]
