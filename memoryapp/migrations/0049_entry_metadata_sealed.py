"""An entry's metadata and sender name are sealed at rest when encryption is on (issue 25 §6):
what SQL read inside the metadata moves to columns of its own, filled here from the rows written
before (their metadata is plaintext JSON): `sender` from `metadata.userId`, `fork_of` from
`metadata.forkOf`. The values themselves are sealed by `encryption_rotate` (a row in plaintext is
sealed by its next run), as for a database written before encryption was turned on."""

import governance.crypto.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0048_subject_index_run_ledger"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="entry",
            name="entry_sender_idx",
        ),
        migrations.AddField(
            model_name="entry",
            name="fork_of",
            field=models.CharField(blank=True, db_default="", default="", max_length=40),
        ),
        migrations.AddField(
            model_name="entry",
            name="sender",
            field=models.CharField(blank=True, db_default="", default="", max_length=128),
        ),
        migrations.AddField(
            model_name="entry",
            name="sender_name_hashes",
            field=governance.crypto.fields.BlindIndexField(
                base_field=models.BigIntegerField(), blank=True, null=True, size=None, source="sender_name"
            ),
        ),
        migrations.RunSQL(
            """
            UPDATE memoryapp_entry SET
              sender = CASE WHEN jsonb_typeof(metadata -> 'userId') = 'string'
                            THEN left(metadata ->> 'userId', 128) ELSE '' END,
              fork_of = CASE WHEN jsonb_typeof(metadata -> 'forkOf') = 'string'
                             THEN left(metadata ->> 'forkOf', 40) ELSE '' END
            WHERE jsonb_typeof(metadata) = 'object' AND (metadata ? 'userId' OR metadata ? 'forkOf')
            """,
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="entry",
            name="metadata",
            field=governance.crypto.fields.SealedMetadataField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="entry",
            name="sender_name",
            field=governance.crypto.fields.SealedTextField(blank=True, default=""),
        ),
        migrations.AddIndex(
            model_name="entry",
            index=models.Index(
                condition=models.Q(("sender", ""), _negated=True),
                fields=["agent", "sender"],
                name="entry_sender_column_idx",
            ),
        ),
    ]
