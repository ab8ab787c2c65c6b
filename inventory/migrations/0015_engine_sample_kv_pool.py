"""The engine's KV pool as vLLM reports it in `vllm:cache_config_info`, kept per sample."""

from django.db import migrations

FORWARD = """
ALTER TABLE inventory_engine_sample
    ADD COLUMN IF NOT EXISTS kv_pool_tokens bigint,
    ADD COLUMN IF NOT EXISTS kv_pool_bytes bigint,
    ADD COLUMN IF NOT EXISTS memory_fraction real;
"""
BACKWARD = """
ALTER TABLE inventory_engine_sample
    DROP COLUMN IF EXISTS kv_pool_tokens,
    DROP COLUMN IF EXISTS kv_pool_bytes,
    DROP COLUMN IF EXISTS memory_fraction;
"""


class Migration(migrations.Migration):
    dependencies = [("inventory", "0014_deployment_pipeline_parallel_kv_heads_help")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
