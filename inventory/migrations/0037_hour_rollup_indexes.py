"""The hour rollups and the hourly packs of the analyses' minutes keep one b-tree, their key.
Every refresh cycle folds the minute being filled into every hour row and pack of the fleet;
their pages have no room for the next version (hour partitions hold 730 days and are kept
full; a pack grows through its hour), so each of those updates writes an entry in every b-tree
of its table. Nothing reads a process hour row by its deployment, nor a pack by its hour alone
(the pages read them by card or deployment, `inventory.timeseries.queries`); whole-fleet
questions ask for the newest buckets (the board's two hours, the hours a refresh makes whole
again), which a BRIN index on the bucket answers: its block ranges not yet summarized, where
new row versions land, are always read, and an update costs it at most a range widened. On a database with history the
BRIN builds read every hour partition once (the refresh waits for them; ingest does not).
"""

from django.db import migrations

TABLES = [
    *(f"inventory_{kind}_rollup_1h" for kind in ("card", "process", "engine")),
    "inventory_memory_minutes_1h",
    "inventory_engine_minutes_1h",
]

FORWARD = "DROP INDEX IF EXISTS inventory_process_rollup_1h_deployment;\n" + "".join(
    f"DROP INDEX IF EXISTS {table}_bucket;\n"
    f"CREATE INDEX {table}_bucket_brin ON {table} USING brin (bucket) "
    "WITH (autosummarize = on);\n"
    for table in TABLES
)
BACKWARD = "".join(
    f"DROP INDEX IF EXISTS {table}_bucket_brin;\nCREATE INDEX {table}_bucket ON {table} (bucket);\n"
    for table in TABLES
) + (
    "CREATE INDEX inventory_process_rollup_1h_deployment ON inventory_process_rollup_1h "
    "(deployment_id, bucket) WHERE deployment_id IS NOT NULL;\n"
)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0036_rollup_dirty_batches")]

    operations = [migrations.RunSQL(FORWARD, reverse_sql=BACKWARD)]
