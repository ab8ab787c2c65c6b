"""Ledgers as JSON: the API's answer and the host page's chart data."""

from __future__ import annotations

from inventory.reports.ledger import CardView


def ledger_json(views: list[CardView]) -> list[dict]:
    return [
        {
            "card": view.label or str(view.gpu),
            "mig_instance": bool(view.label),
            "index": view.gpu.index,
            "uuid": view.gpu.uuid,
            "sampled_at": view.at.isoformat() if view.at else None,
            "total_bytes": view.ledger.total_bytes,
            "status": view.status.status.value,
            "status_reason": view.status.reason,
            "headroom_bytes": view.headroom_bytes,
            "lines": [
                {
                    "kind": line.kind.value,
                    "bytes": line.bytes,
                    "basis": line.basis.value,
                    "source": line.source,
                    "deployment": line.deployment,
                    "pid": line.pid,
                }
                for line in view.ledger.lines
            ],
            "notes": list(view.ledger.notes),
            # Each deployment's KV on the card: the engine's pool, what of it is in use, and
            # what the console's policy reserves; three figures, never one for another.
            "kv_pools": [
                {
                    "deployment": name,
                    "pool_bytes": pool.pool_bytes,
                    "pool_source": pool.pool_source,
                    "in_use_bytes": pool.in_use_bytes,
                    "reserved_by_policy_bytes": pool.reserved_by_policy_bytes,
                    "memory_fraction": pool.memory_fraction,
                }
                for name, pool in view.kv_pools
            ],
        }
        for view in views
    ]
