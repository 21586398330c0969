"""A thread's metadata is sealed at rest when encryption is on (issue 25 §6): what SQL read inside
it moves to columns of its own. `participants` is filled here from the rows' plaintext
`memoryUserIds` (ids: the next save of a thread's metadata with encryption on replaces them by the
people's pseudonyms, and a person's erasure finds either). `metadata_hashes` (the list filter's
blind index) and the sealing itself are made by `encryption_rotate`, as for a database written
before encryption was turned on."""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import governance.crypto.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0049_entry_metadata_sealed"),
    ]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="metadata_hashes",
            field=governance.crypto.fields.PairIndexField(
                base_field=models.BigIntegerField(), blank=True, null=True, size=None, source="metadata"
            ),
        ),
        migrations.AddField(
            model_name="thread",
            name="participants",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=128), blank=True, default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="thread",
            name="words_of",
            field=models.CharField(blank=True, db_default="", default="", max_length=128),
        ),
        migrations.RunSQL(
            """
            UPDATE memoryapp_thread SET participants = ARRAY(
              SELECT DISTINCT left(p #>> '{}', 128) FROM jsonb_array_elements(metadata -> 'memoryUserIds') AS p
               WHERE jsonb_typeof(p) = 'string')
            WHERE jsonb_typeof(metadata) = 'object' AND jsonb_typeof(metadata -> 'memoryUserIds') = 'array'
            """,
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="thread",
            name="metadata",
            field=governance.crypto.fields.SealedMetadataField(blank=True, default=dict),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=django.contrib.postgres.indexes.GinIndex(
                condition=models.Q(("metadata_hashes__isnull", False)),
                fields=["metadata_hashes"],
                name="thread_metadata_hashes_gin",
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=django.contrib.postgres.indexes.GinIndex(fields=["participants"], name="thread_participants_gin"),
        ),
    ]
