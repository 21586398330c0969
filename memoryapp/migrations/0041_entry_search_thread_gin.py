"""Keyword search within a thread starts from the thread (issue 26): the full-text GIN index also
holds the thread id (btree_gin), replacing the one-column index on `search_vector`."""

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0040_channel_sessions"),
    ]

    operations = [
        BtreeGinExtension(),
        migrations.AddIndex(
            model_name="entry",
            index=GinIndex(
                fields=["thread", "search_vector"], name="entry_search_thread_gin", gin_pending_list_limit=256
            ),
        ),
        migrations.RemoveIndex(model_name="entry", name="entry_search_gin"),
    ]
