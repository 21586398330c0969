"""The access log's and the runs' foreign keys cascade in the database itself (ON DELETE CASCADE),
not only in Django's ORM: an erasure that deletes threads (or agents) with raw bulk deletes
(`QuerySet._raw_delete`, plain SQL) takes their access rows and runs with them instead of
failing on the constraint at commit. The ORM's own cascade still runs first and finds nothing left
to do twice."""

from django.db import migrations

from memoryapp.migrations._db_cascade import foreign_keys_rebuilt

TABLES = ("memoryapp_accesslog", "memoryapp_threadrun")


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0018_auto_compaction")]

    operations = [
        migrations.RunSQL(
            foreign_keys_rebuilt(TABLES, "ON DELETE CASCADE"), reverse_sql=foreign_keys_rebuilt(TABLES, "")
        )
    ]
