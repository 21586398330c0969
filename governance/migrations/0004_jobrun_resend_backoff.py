"""Job runs keep what the job sweep needs to resend a run with a limit (governance.jobs).

`eta` (not before: the countdown a run was sent with), `resends` and `next_check_at` (the sweep's
backoff), `message_id` (the message whose process claimed the run). Queued runs the broker took
before get a check at the next sweep, as they would have had before.
"""

from django.db import migrations, models


def check_sent_runs_at_the_next_sweep(apps, schema_editor):
    JobRun = apps.get_model("governance", "JobRun")
    JobRun.objects.filter(status="queued", sent_at__isnull=False).update(next_check_at=models.F("sent_at"))


class Migration(migrations.Migration):

    dependencies = [
        ('governance', '0003_jobs_sweep_schedule'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='eta',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='message_id',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='next_check_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='resends',
            field=models.IntegerField(default=0),
        ),
        migrations.RunPython(check_sent_runs_at_the_next_sweep, migrations.RunPython.noop),
    ]
