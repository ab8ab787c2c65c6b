"""The minute rollups' partitions keep half of each page free: the refresh now rewrites the
minute being filled in place, every cycle, and an update that finds room on its row's page
stays there (a HOT update) and writes no index entry. Partitions made from now on are created
so (inventory.timeseries.partitions); this sets the ones already there, whose pages take the
setting as they are next written."""

from django.db import migrations

_PARTITIONS = """
SELECT child.relname FROM pg_inherits
JOIN pg_class parent ON parent.oid = pg_inherits.inhparent
JOIN pg_class child ON child.oid = pg_inherits.inhrelid
WHERE parent.relname IN ('inventory_card_rollup_1m', 'inventory_process_rollup_1m',
                         'inventory_engine_rollup_1m')
"""


def _each_partition(setting: str) -> str:
    return f"""
DO $$
DECLARE partition record;
BEGIN
    FOR partition IN {_PARTITIONS} LOOP
        EXECUTE format('ALTER TABLE %I {setting}', partition.relname);
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0034_engine_hour_sums_before")]

    operations = [
        migrations.RunSQL(
            _each_partition("SET (fillfactor = 50)"),
            reverse_sql=_each_partition("RESET (fillfactor)"),
        )
    ]
