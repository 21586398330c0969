"""The run event ledger (000 `RunLedger`, `SnapshotAccumulator`): a run's events and latest snapshot."""

import django.db.models.deletion
from django.db import migrations, models

import governance.crypto.fields


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0043_evidence_tool_call_file_range")]

    operations = [
        migrations.AddField(
            model_name="threadrun",
            name="ledger_outcome",
            field=models.CharField(blank=True, default="", max_length=8),
        ),
        migrations.AddField(
            model_name="threadrun",
            name="ledger_seq",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="threadrun",
            name="snapshot",
            field=governance.crypto.fields.SealedJSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="threadrun",
            name="snapshot_seq",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="RunEvent",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("seq", models.BigIntegerField()),
                ("kind", models.CharField(max_length=16)),
                ("body", governance.crypto.fields.SealedJSONField(blank=True, default=dict)),
                ("at", models.DateTimeField()),
                (
                    "agent",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.threadrun",
                    ),
                ),
                (
                    "thread",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.thread",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["thread"], name="run_event_thread_idx")],
                "constraints": [models.UniqueConstraint(fields=("run", "seq"), name="run_event_run_seq_uniq")],
            },
        ),
    ]
