"""Channel sessions (004 `SessionManager`): a channel conversation mapped onto one thread."""

import django.db.models.deletion
from django.db import migrations, models

import memoryapp.models.sessions


def _cascade(tables: tuple[str, ...], on_delete: str) -> str:
    """The foreign keys of these tables cascade in the database itself, as 0019 made the runs' do:
    an erasure deletes threads with raw bulk deletes, and these rows must go with them."""
    names = ", ".join(f"'{t}'::regclass" for t in tables)
    return f"""
DO $$
DECLARE r record;
BEGIN
  FOR r IN
    SELECT c.conname, c.conrelid::regclass AS tbl, a.attname AS col, c.confrelid::regclass AS ref
      FROM pg_constraint c
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
     WHERE c.contype = 'f' AND c.conrelid IN ({names})
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
    EXECUTE format(
      'ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (%I) REFERENCES %s (id) {on_delete} DEFERRABLE INITIALLY DEFERRED',
      r.tbl, r.conname, r.col, r.ref
    );
  END LOOP;
END $$;
"""


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
        migrations.RunSQL(
            _cascade(("memoryapp_channelsession",), "ON DELETE CASCADE"),
            reverse_sql=_cascade(("memoryapp_channelsession",), ""),
        ),
    ]
