"""The hours whose hourly rollups and packs a refresh left as the fold of their minute rollups.

A row says: this hour's 1-hour rows and packed minutes are exactly what its 1-minute rows give,
and the last of those minutes is `last_minute`. The refresh folds a minute into its hour
(instead of recomputing the hour from all its minutes) only where such a row says it may (see
inventory.timeseries.rollups); an hour without one is recomputed whole, as every hour was
before, so no backfill is needed.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("inventory", "0029_host_summary")]

    operations = [
        migrations.RunSQL(
            "CREATE TABLE inventory_rollup_hour_folded ("
            "bucket timestamptz PRIMARY KEY, last_minute timestamptz NOT NULL);",
            reverse_sql="DROP TABLE IF EXISTS inventory_rollup_hour_folded;",
        )
    ]
