"""Extraction's mark moves out of the agent's thread metadata into its own column."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0006_entry_search_pending_list")]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="extraction",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunSQL(
            sql=(
                "UPDATE memoryapp_thread SET extraction = metadata -> 'extraction', metadata = metadata - 'extraction' "
                "WHERE jsonb_typeof(metadata -> 'extraction') = 'object'"
            ),
            reverse_sql=(
                "UPDATE memoryapp_thread SET metadata = jsonb_set(metadata, '{extraction}', extraction) "
                "WHERE extraction <> '{}'::jsonb"
            ),
        ),
    ]
