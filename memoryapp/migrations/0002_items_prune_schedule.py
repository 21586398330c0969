"""The beat schedule of the facts prune: now declared in governance.jobs.SCHEDULES.

This migration created the schedule's row once; the rows are now kept by `schedules_sync` after
every migrate (created when missing, operator edits kept), so it does nothing. It stays because
migrations never move.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(migrations.RunPython.noop, migrations.RunPython.noop)]
