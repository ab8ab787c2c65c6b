"""An engine hour row keeps its deployment's last minute in the hour and its floating-point sums
over the minutes before that one, so that the minute being filled folds into the hour to the
last bit (a float sum taken in time order is a left fold: the sums before the last minute plus
that minute's new figures) instead of the hour being recomputed from all its minutes each
cycle. Rows written before this have neither: every hour is recomputed whole at its next dirty
minute (its folded mark dropped), which writes them."""

from django.db import migrations

FORWARD = """
ALTER TABLE inventory_engine_rollup_1h ADD COLUMN last_bucket timestamptz;
ALTER TABLE inventory_engine_rollup_1h ADD COLUMN running_sum_before double precision;
ALTER TABLE inventory_engine_rollup_1h ADD COLUMN requests_before double precision;
ALTER TABLE inventory_engine_rollup_1h ADD COLUMN requests_s_before real;
DELETE FROM inventory_rollup_hour_folded;
"""
BACKWARD = """
ALTER TABLE inventory_engine_rollup_1h DROP COLUMN last_bucket;
ALTER TABLE inventory_engine_rollup_1h DROP COLUMN running_sum_before;
ALTER TABLE inventory_engine_rollup_1h DROP COLUMN requests_before;
ALTER TABLE inventory_engine_rollup_1h DROP COLUMN requests_s_before;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0033_rollup_dirty_hosts")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)]
