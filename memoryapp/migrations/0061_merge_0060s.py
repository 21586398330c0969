"""Two migrations numbered 0060 landed side by side (the duplicate indexes dropped, a person's
identifiers given with an erasure): independent of each other, joined here so the graph has one
leaf again."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0060_drop_duplicate_indexes"),
        ("memoryapp", "0060_personidentifier_given"),
    ]

    operations: list[migrations.operations.base.Operation] = []
