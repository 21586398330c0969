"""The data keys' `varchar_pattern_ops` copy of their primary key, dropped (issue 26, as memoryapp's
migration 0060 does for its tables): it serves only `LIKE 'prefix%'`, and no query matches a key id
by prefix. CONCURRENTLY, outside a transaction: the service keeps reading keys meanwhile."""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("governance", "0011_pseudonym_keys"),
    ]

    operations = [
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS governance_datakey_id_68780cee_like",
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS governance_datakey_id_68780cee_like"
            " ON governance_datakey (id varchar_pattern_ops)",
        ),
    ]
