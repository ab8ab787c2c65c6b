"""An engine's request count keeps the seconds it was counted over, and the rollups the sum of
them, so a rate is requests over the time they were served in, whatever the agent's flush and
scrape intervals (the demo's history flushes every 10 minutes: each of its minute rows held 10
minutes of requests, and the busy-hour rate read ten times the traffic). Rows written before
this have no window (NULL): readers take a minute row's for 60 s, as they did."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("inventory", "0025_mig_layout_from_telemetry")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE inventory_engine_sample ADD COLUMN requests_window_s real;"
            "ALTER TABLE inventory_engine_rollup_1m ADD COLUMN requests_s real;"
            "ALTER TABLE inventory_engine_rollup_1h ADD COLUMN requests_s real;",
            reverse_sql="ALTER TABLE inventory_engine_sample DROP COLUMN requests_window_s;"
            "ALTER TABLE inventory_engine_rollup_1m DROP COLUMN requests_s;"
            "ALTER TABLE inventory_engine_rollup_1h DROP COLUMN requests_s;",
        )
    ]
