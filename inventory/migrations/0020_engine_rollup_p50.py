"""The engine rollups keep the interval's P50 latency too, for the latency history's median
line beside P95 and P99. Rows rolled up before this have none (NULL): the line starts here."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("inventory", "0019_oom_cause_reason_and_verbose_names")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE inventory_engine_rollup_1m ADD COLUMN latency_p50_max real;"
            "ALTER TABLE inventory_engine_rollup_1h ADD COLUMN latency_p50_max real;",
            reverse_sql="ALTER TABLE inventory_engine_rollup_1m DROP COLUMN latency_p50_max;"
            "ALTER TABLE inventory_engine_rollup_1h DROP COLUMN latency_p50_max;",
        )
    ]
