"""Job runs record their task and when the broker took them (governance.jobs: nothing lost).

Open runs from before get the task of their kind, so the job sweep can send the queued ones the
broker never took (a run is claimed once however often it is sent) and requeue the running ones
whose worker died.
"""

from django.db import migrations, models

# The task of each kind of job enqueued so far (a frozen copy: migrations never import the app).
TASKS = {
    "embedding": "memoryapp.tasks.embed_pending",
    "reembed": "memoryapp.tasks.embed_all_again",
    "compaction": "memoryapp.tasks.compact_thread",
    "extraction": "memoryapp.tasks.extract_thread",
    "items_prune": "memoryapp.tasks.items_prune_job",
}


def name_tasks_of_open_runs(apps, schema_editor):
    JobRun = apps.get_model("governance", "JobRun")
    for kind, task in TASKS.items():
        JobRun.objects.filter(kind=kind, status__in=["queued", "running"], task_name="").update(task_name=task)


class Migration(migrations.Migration):

    dependencies = [
        ('governance', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='sent_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='task_name',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(condition=models.Q(('status__in', ['queued', 'running'])), fields=['status', 'created_at'], name='jobrun_open_idx'),
        ),
        migrations.RunPython(name_tasks_of_open_runs, migrations.RunPython.noop),
    ]
