"""A dirty mark names the batch that wrote it: a refresh folds the samples of the batches whose
marks it read into their minute's card and process rows, instead of recomputing the minute from
every sample it holds (inventory.timeseries.rollups). A mark without a batch (those before this
migration, and tools that dirty a minute) has its minute recomputed as before."""

from django.db import migrations

FORWARD = "ALTER TABLE inventory_rollup_dirty ADD COLUMN batch_id uuid"
BACKWARD = "ALTER TABLE inventory_rollup_dirty DROP COLUMN batch_id"


class Migration(migrations.Migration):
    dependencies = [("inventory", "0035_minute_partitions_fillfactor")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)]
