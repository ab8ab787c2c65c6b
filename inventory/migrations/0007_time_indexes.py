"""Indexes on time for whole-fleet scans ("every card's last two hours").

The rollups get b-trees on their bucket: whole-fleet questions ask for the newest buckets,
which a BRIN index would not have summarized yet. Raw samples, read per card through their
(card, time) b-trees and otherwise only in old, settled ranges (retention, reports), get a
self-summarizing BRIN index, which costs ingest next to nothing.
"""

from django.db import migrations

ROLLUPS = [
    f"inventory_{kind}_rollup_{resolution}"
    for kind in ("card", "process", "engine")
    for resolution in ("1m", "1h")
]
RAW = ["inventory_card_sample", "inventory_process_sample", "inventory_engine_sample"]


class Migration(migrations.Migration):
    dependencies = [("inventory", "0006_kv_heads_help")]

    operations = [
        migrations.RunSQL(
            "".join(f"CREATE INDEX {table}_bucket ON {table} (bucket);\n" for table in ROLLUPS)
            + "".join(
                f"CREATE INDEX {table}_ts_brin ON {table} USING brin (ts) "
                "WITH (autosummarize = on);\n"
                for table in RAW
            ),
            reverse_sql="".join(f"DROP INDEX IF EXISTS {table}_bucket;\n" for table in ROLLUPS)
            + "".join(f"DROP INDEX IF EXISTS {table}_ts_brin;\n" for table in RAW),
        )
    ]
