"""The beat schedule of the job sweep: every minute (editable in the admin, Periodic tasks)."""

from django.db import migrations

TASK = "governance.tasks.jobs_sweep"
NAME = "Send job runs the broker never got; requeue runs whose worker died"


def add_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=1, period="minutes")
    PeriodicTask.objects.get_or_create(name=NAME, defaults={"task": TASK, "interval": every, "enabled": True})


def remove_schedule(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name=NAME, task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("governance", "0002_jobrun_handover"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
