"""A person's identifier given only with their erasure (issue 25 §4, leftovers): kept, sealed, for
the erasure's span (memoryapp.subjects.erasing), so writes naming her by it store the placeholder
and a resume of the erasure interrupted uses it. A column with a constant default: no rewrite."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memoryapp", "0059_entry_thread_vectors")]

    operations = [
        migrations.AddField(
            model_name="personidentifier",
            name="given",
            field=models.BooleanField(default=False),
        ),
    ]
