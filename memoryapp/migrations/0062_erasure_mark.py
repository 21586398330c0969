"""A person's erasure mark becomes a row of its own (`ErasureMark`), no longer columns of her
registry rows: a person with no identifier, registered or given, has no such row, and an erasure of
her interrupted was never marked, so never resumed. The marks standing are carried over (one per
agent and person, her earliest), then the columns go."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

MARKS_CARRIED = """
INSERT INTO memoryapp_erasuremark (agent_id, user_id, since, keeps, mode)
SELECT DISTINCT ON (agent_id, user_id)
       agent_id, user_id, erasing_since, COALESCE(erasing_keeps, '{}'), COALESCE(NULLIF(erasing_mode, ''), 'erase')
  FROM memoryapp_personidentifier
 WHERE erasing_since IS NOT NULL
 ORDER BY agent_id, user_id, erasing_since, id
"""

MARKS_BACK = """
UPDATE memoryapp_personidentifier AS p
   SET erasing_since = m.since, erasing_keeps = m.keeps, erasing_mode = m.mode
  FROM memoryapp_erasuremark AS m
 WHERE m.agent_id = p.agent_id AND m.user_id = p.user_id
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0061_merge_0060s"),
    ]

    operations = [
        migrations.CreateModel(
            name="ErasureMark",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("user_id", models.CharField(max_length=128)),
                ("since", models.DateTimeField()),
                (
                    "keeps",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=32), blank=True, default=list, size=None
                    ),
                ),
                ("mode", models.CharField(default="erase", max_length=8)),
                (
                    "agent",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("agent", "user_id"), name="erasure_mark_uniq")],
            },
        ),
        migrations.RunSQL(MARKS_CARRIED, MARKS_BACK),
        migrations.RemoveField(model_name="personidentifier", name="erasing_keeps"),
        migrations.RemoveField(model_name="personidentifier", name="erasing_mode"),
        migrations.RemoveField(model_name="personidentifier", name="erasing_since"),
    ]
