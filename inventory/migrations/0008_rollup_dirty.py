"""The minutes whose rollups need recomputing, as ingest leaves them."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("inventory", "0007_time_indexes")]

    operations = [
        migrations.RunSQL(
            "CREATE TABLE inventory_rollup_dirty (bucket timestamptz PRIMARY KEY);",
            reverse_sql="DROP TABLE IF EXISTS inventory_rollup_dirty;",
        )
    ]
