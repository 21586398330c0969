"""When an entry was stored (issue 23: the overview's "entries stored per agent per day" counted by
the client's `created_at`, so 1,500 entries imported today, dated 2023, did not appear).

The column is added empty, then given the database's clock as its default: the entries stored before
keep NULL (their `created_at` is all that is known of them) rather than all seeming stored on the
day of this migration. No table rewrite either way (a NULL column, then a default for new rows)."""

import django.db.models.functions.datetime
from django.contrib.postgres.indexes import BrinIndex
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0031_screening_admin"),
    ]

    operations = [
        migrations.AddField(
            model_name="entry",
            name="stored_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name="entry",
            name="stored_at",
            field=models.DateTimeField(
                blank=True, db_default=django.db.models.functions.datetime.Now(), editable=False, null=True
            ),
        ),
        migrations.AddIndex(
            model_name="entry",
            index=BrinIndex(fields=["stored_at"], name="entry_stored_brin"),
        ),
    ]
