"""The fleet board's figures per host and the run that wrote them, kept by a periodic job so SQL
can sort and page the board (inventory.models.summary)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0028_packed_samples"),
    ]

    operations = [
        migrations.CreateModel(
            name="HostSummary",
            fields=[
                (
                    "host",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="board_summary",
                        serialize=False,
                        to="inventory.host",
                    ),
                ),
                ("cards", models.PositiveIntegerField()),
                ("largest_headroom_bytes", models.BigIntegerField(null=True)),
                ("headroom_card", models.CharField(blank=True, max_length=32)),
                ("worst_fragmentation", models.FloatField(null=True)),
                ("fragmentation_status", models.CharField(max_length=8, null=True)),
                ("p99_status", models.CharField(max_length=8)),
                ("p99_detail", models.TextField(blank=True)),
            ],
        ),
        migrations.CreateModel(
            name="HostSummaryRun",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("computed_at", models.DateTimeField()),
            ],
        ),
    ]
