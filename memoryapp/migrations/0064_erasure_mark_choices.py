"""An erasure's mark keeps all its choices (`mentions`, every group excluded with its reason), so
its resume does what its first run would have done: before, it had only the excluded groups that
are the index's tables, and a resume redacted the participants lists an officer had kept. A mark
standing from before keeps `mentions` "" (told apart: governance.erasure.resume reads its choices
from what it has)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0063_entry_embedding_bits"),
    ]

    operations = [
        migrations.AddField(
            model_name="erasuremark",
            name="mentions",
            field=models.CharField(blank=True, default="", max_length=8),
        ),
        migrations.AddField(
            model_name="erasuremark",
            name="excluded",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
