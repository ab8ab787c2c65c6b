"""Plans are sent by one beat pass (inventory.send_collection_plans), which notes what each
host was sent last; the per-host beat entries that sent every host its plan every period go."""

import django.db.models.deletion
from django.db import migrations, models


def drop_per_host_entries(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(task="inventory.send_collection_plan").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0026_engine_request_windows"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.CreateModel(
            name="PlanDelivery",
            fields=[
                (
                    "host",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="plan_delivery",
                        serialize=False,
                        to="inventory.host",
                    ),
                ),
                ("digest", models.CharField(blank=True, max_length=64)),
                ("sent_at", models.DateTimeField()),
            ],
        ),
        # Not reversible into the old entries: the code that kept them is gone.
        migrations.RunPython(drop_per_host_entries, migrations.RunPython.noop),
    ]
