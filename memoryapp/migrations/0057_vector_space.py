"""The vector space record (memoryapp.models.space.VectorSpace).

A database that already holds vectors gets a row saying what made them. A migration cannot read
the environment the vectors were embedded under, so it assumes the only model there was before
this migration could be told apart: EMBEDDER=local with the then default all-MiniLM-L6-v2, at the
vector columns' dimension. A deployment that embedded otherwise (EMBEDDER=openai, another
EMBEDDING_MODEL) says so with `python manage.py vector_space --record EMBEDDER:MODEL`, or runs
`python manage.py reembed`, which records the configured model when it finishes. A database
without vectors gets no row: the first vector written records the configured model.
"""

from django.db import migrations, models
from django.utils import timezone

ASSUMED = ("local", "all-MiniLM-L6-v2")


def record_existing(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM memoryapp_entry WHERE embedding IS NOT NULL)"
            " OR EXISTS (SELECT 1 FROM memoryapp_memoryitem WHERE embedding IS NOT NULL)"
            " OR EXISTS (SELECT 1 FROM memoryapp_knowledgechunk WHERE embedding IS NOT NULL)"
        )
        if not cursor.fetchone()[0]:
            return
        cursor.execute(
            "SELECT a.atttypmod FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relname = 'memoryapp_entry' AND a.attname = 'embedding' AND NOT a.attisdropped"
        )
        dimensions = int(cursor.fetchone()[0])
    apps.get_model("memoryapp", "VectorSpace").objects.create(
        id=1, embedder=ASSUMED[0], model=ASSUMED[1], dimensions=dimensions, recorded_at=timezone.now()
    )


class Migration(migrations.Migration):
    dependencies = [
        ("memoryapp", "0056_person_erasing_mark"),
    ]

    operations = [
        migrations.CreateModel(
            name="VectorSpace",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("embedder", models.CharField(max_length=20)),
                ("model", models.CharField(blank=True, max_length=200)),
                ("dimensions", models.PositiveIntegerField()),
                ("recorded_at", models.DateTimeField()),
                ("moving_to", models.CharField(blank=True, default="", max_length=220)),
                ("moving_since", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "constraints": [models.CheckConstraint(condition=models.Q(("id", 1)), name="vector_space_one_row")],
            },
        ),
        migrations.RunPython(record_existing, migrations.RunPython.noop),
    ]
