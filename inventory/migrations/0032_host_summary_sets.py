"""The board's summaries in sets, one a window hour, so that a run late in an hour can write the
next hour's set beside the current one (inventory.models.summary). The summaries are what the
next run writes again: the tables are made anew, empty, not converted."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0031_running_blocks"),
    ]

    operations = [
        migrations.DeleteModel(name="HostSummary"),
        migrations.DeleteModel(name="HostSummaryRun"),
        migrations.CreateModel(
            name="HostSummary",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hour", models.DateTimeField()),
                ("cards", models.PositiveIntegerField()),
                ("largest_headroom_bytes", models.BigIntegerField(null=True)),
                ("headroom_card", models.CharField(blank=True, max_length=32)),
                ("worst_fragmentation", models.FloatField(null=True)),
                ("fragmentation_status", models.CharField(max_length=8, null=True)),
                ("p99_status", models.CharField(max_length=8)),
                ("p99_detail", models.TextField(blank=True)),
                (
                    "host",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="board_summaries",
                        to="inventory.host",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("host", "hour"), name="host_summary_once_a_set")
                ],
            },
        ),
        migrations.CreateModel(
            name="HostSummaryRun",
            fields=[
                ("hour", models.DateTimeField(primary_key=True, serialize=False)),
                ("computed_at", models.DateTimeField()),
            ],
        ),
    ]
