"""Dirty marks name the host as well as the minute, and are never merged: each write adds its own
marks and a refresh deletes only the marks it read. A mark merged into one the refresh had
already read (`ON CONFLICT DO NOTHING`) was deleted with it, and the batch that wrote it, if it
committed after the refresh had read the minute's samples, was never rolled up. Host 0 is every
host of the minute (the marks there before this migration, and tools that dirty a minute)."""

from django.db import migrations

FORWARD = """
ALTER TABLE inventory_rollup_dirty DROP CONSTRAINT inventory_rollup_dirty_pkey;
ALTER TABLE inventory_rollup_dirty ADD COLUMN host_id bigint NOT NULL DEFAULT 0;
ALTER TABLE inventory_rollup_dirty ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
CREATE INDEX inventory_rollup_dirty_bucket ON inventory_rollup_dirty (bucket);
"""
BACKWARD = """
DROP INDEX inventory_rollup_dirty_bucket;
DELETE FROM inventory_rollup_dirty d USING inventory_rollup_dirty e
    WHERE d.bucket = e.bucket AND d.id > e.id;
ALTER TABLE inventory_rollup_dirty DROP COLUMN id;
ALTER TABLE inventory_rollup_dirty DROP COLUMN host_id;
ALTER TABLE inventory_rollup_dirty ADD PRIMARY KEY (bucket);
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0032_host_summary_sets")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)]
