"""Channel sessions (004 `SessionManager`): a channel conversation mapped onto one thread.

Their foreign keys cascade in the database itself from 0045 on: a RunSQL here would run before
Django adds the new table's foreign keys (at the end of this migration) and find none. This one had
such a step, which did nothing; it was dropped, so a database that ran it and one that did not
stand the same."""

import django.db.models.deletion
from django.db import migrations, models

import memoryapp.models.sessions


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0039_knowledge_documents")]

    operations = [
        migrations.CreateModel(
            name="ChannelSession",
            fields=[
                (
                    "id",
                    models.CharField(
                        default=memoryapp.models.sessions.new_session_id,
                        editable=False,
                        max_length=40,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("user_id", models.CharField(max_length=128)),
                ("channel_type", models.CharField(max_length=64)),
                ("channel_id", models.CharField(max_length=255)),
                (
                    "status",
                    models.CharField(
                        choices=[("active", "Active"), ("closed", "Closed")], default="active", max_length=8
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("closed_at", models.DateTimeField(blank=True, null=True)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="memoryapp.agent"
                    ),
                ),
                (
                    "thread",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="channel_session",
                        to="memoryapp.thread",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["agent", "-created_at", "-id"], name="channel_session_agent_idx"),
                    models.Index(fields=["agent", "user_id", "-created_at"], name="channel_session_user_idx"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("status", "active")),
                        fields=("agent", "user_id", "channel_type", "channel_id"),
                        name="channel_session_one_active",
                    )
                ],
            },
        ),
    ]
