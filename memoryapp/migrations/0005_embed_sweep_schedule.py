"""The beat schedule of the embedding sweep: every 5 minutes (editable in the admin, Periodic tasks)."""

from django.db import migrations

TASK = "memoryapp.tasks.embed_sweep"
NAME = "Embed what is not embedded yet"


def add_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    PeriodicTask.objects.get_or_create(name=NAME, defaults={"task": TASK, "interval": every, "enabled": True})


def remove_schedule(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(name=NAME, task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0004_entry_plural"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
