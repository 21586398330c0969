from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memoryapp', '0036_compaction_message_threshold'),
    ]

    operations = [
        migrations.AddField(
            model_name='agent',
            name='people_version',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
