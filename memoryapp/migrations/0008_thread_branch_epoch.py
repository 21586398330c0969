"""Thread.branch_epoch: 0 while the active branch is the whole thread; existing trees start at 1."""

from django.db import migrations, models

# A thread is one chain when it has one root, every other entry has its own parent, and the leaf
# is the newest entry; anything else is branched (as `thread_import` tests a file).
MARK_EXISTING = """
UPDATE memoryapp_thread t SET branch_epoch = 1
 WHERE EXISTS (
         SELECT 1 FROM memoryapp_entry e WHERE e.thread_id = t.id GROUP BY e.thread_id
         HAVING count(*) FILTER (WHERE e.parent_id IS NULL) > 1 OR count(DISTINCT e.parent_id) < count(*) - 1
       )
    OR t.active_leaf_id IS DISTINCT FROM (
         SELECT e.id FROM memoryapp_entry e WHERE e.thread_id = t.id ORDER BY e.seq DESC LIMIT 1
       )
"""


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0007_thread_extraction")]

    operations = [
        migrations.AddField(model_name="thread", name="branch_epoch", field=models.PositiveIntegerField(default=0)),
        migrations.RunSQL(sql=MARK_EXISTING, reverse_sql=migrations.RunSQL.noop),
    ]
