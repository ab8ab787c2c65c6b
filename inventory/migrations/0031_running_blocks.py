"""Each deployment's peaks of running requests an aligned block of hours, as a histogram.

`/metrics` ranks each deployment's week of minutes for the KV gap's P95 at every scrape: at
10,000 hosts some 300 million minutes a scrape. A block of 2**level hours (aligned on the
epoch) holds, for every deployment with a peak in it, each distinct peak and how many of its
minutes had it; a week is then about fourteen blocks a deployment plus the minutes at its two
ends (inventory.timeseries.running_blocks). A row of `inventory_running_block` says that the
block's histograms are exactly what its minute rollups hold now: the rollup refresh deletes it
for every block that a minute it rewrites falls in, and a reader uses a block's histograms only
while that row is there. No backfill: blocks are built by their own task, and until they are
the minutes are read as before.
"""

from django.db import migrations

CREATE = """
CREATE TABLE inventory_running_block (
    level smallint NOT NULL,
    start timestamptz NOT NULL,
    complete boolean NOT NULL,
    PRIMARY KEY (level, start)
);
CREATE TABLE inventory_running_histogram (
    level smallint NOT NULL,
    start timestamptz NOT NULL,
    deployment_id bigint NOT NULL,
    peaks float8[] NOT NULL,
    minutes integer[] NOT NULL,
    PRIMARY KEY (level, start, deployment_id)
);
"""
DROP = """
DROP TABLE IF EXISTS inventory_running_histogram;
DROP TABLE IF EXISTS inventory_running_block;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0030_rollup_hour_folded")]

    operations = [migrations.RunSQL(CREATE, reverse_sql=DROP)]
