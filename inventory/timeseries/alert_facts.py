"""The queries behind one alert evaluation: each reads the whole fleet at once, so a cycle
makes the same number of queries for ten hosts as for a thousand."""

import datetime as dt

from inventory.timeseries import packing
from inventory.timeseries.queries import _rows

# Hosts the console collects and has not retired: what alerts watch.
_WATCHED_HOSTS = "h.collector <> 'none' AND h.status <> 'retired'"


def cards_now(since: dt.datetime) -> list[dict]:
    """Every watched card with its newest raw sample after `since` (NULLs when none; the total
    is the sample's, as NVML reported it) and how many deployments that are not stopped sit on
    it."""
    return _rows(
        f"""
        SELECT g.id AS gpu_id, g.host_id, h.name AS host, h.labels AS host_labels, g.index,
               g.uuid, g.product_name,
               coalesce(s.total_bytes, g.memory_total_bytes) AS total_bytes,
               s.used_last, coalesce(s.reserved_last, 0) AS reserved_bytes, s.frag_index_max,
               coalesce(t.tenants, 0) AS tenants
        FROM inventory_gpu g
        JOIN inventory_host h ON h.id = g.host_id
        LEFT JOIN LATERAL (
            SELECT c.total_bytes, c.used_last, c.reserved_last, c.frag_index_max
            FROM inventory_card_sample_newest(g.id, %(since)s, 'infinity', %(packs)s) c
        ) s ON true
        LEFT JOIN (
            SELECT dg.gpu_id, count(*) AS tenants
            FROM inventory_deployment_gpus dg
            JOIN inventory_deployment d ON d.id = dg.deployment_id
            WHERE d.status <> 'stopped'
            GROUP BY dg.gpu_id
        ) t ON t.gpu_id = g.id
        WHERE {_WATCHED_HOSTS}
        ORDER BY g.host_id, g.index
        """,
        {"since": since, "packs": packing.packs_may_hold(since)},
    )


def deployments_now(since: dt.datetime) -> list[dict]:
    """Every deployment that is not stopped on a watched host, with its newest engine P99
    after `since` and its model's SLO."""
    return _rows(
        f"""
        SELECT d.id AS deployment_id, d.host_id, h.name AS host, h.labels AS host_labels,
               d.served_model_id, m.name, m.p99_latency_slo_ms AS slo_ms, d.kv_reservation_bytes,
               d.kv_tokens_per_request, d.isolation_mode, e.latency_p99_s AS p99_s
        FROM inventory_deployment d
        JOIN inventory_host h ON h.id = d.host_id
        JOIN inventory_servedmodel m ON m.id = d.served_model_id
        LEFT JOIN LATERAL (
            SELECT s.latency_p99_s
            FROM inventory_engine_sample_newest(d.id, %(since)s, 'infinity', %(packs)s) s
        ) e ON true
        WHERE d.status <> 'stopped' AND {_WATCHED_HOSTS}
        ORDER BY d.id
        """,
        {"since": since, "packs": packing.packs_may_hold(since)},
    )


def hosts_now(now: dt.datetime, fault_window: dt.timedelta) -> list[dict]:
    """Every watched host: its newest sample time and its collector faults counted over the
    last `fault_window` and over the window before that."""
    return _rows(
        f"""
        SELECT h.id AS host_id, h.name AS host, h.labels AS host_labels,
               cs.last_sample_at, cs.last_batch_at,
               coalesce(f.recent, 0) AS faults_recent, coalesce(f.before, 0) AS faults_before
        FROM inventory_host h
        LEFT JOIN inventory_collectorstatus cs ON cs.host_id = h.id
        LEFT JOIN (
            SELECT host_id,
                   sum(count) FILTER (WHERE last_at > %(recent)s) AS recent,
                   sum(count) FILTER (WHERE last_at <= %(recent)s) AS before
            FROM inventory_collectorfault
            WHERE last_at > %(before)s AND last_at <= %(now)s
            GROUP BY host_id
        ) f ON f.host_id = h.id
        WHERE {_WATCHED_HOSTS}
        ORDER BY h.id
        """,
        {"now": now, "recent": now - fault_window, "before": now - 2 * fault_window},
    )


def events_since(since: dt.datetime, kinds: list[str]) -> list[dict]:
    """Events of these kinds after `since`, counted per host, card, deployment, kind and Xid,
    with the newest one's time."""
    return _rows(
        """
        SELECT e.host_id, h.name AS host, h.labels AS host_labels, e.kind, e.gpu_id,
               g.index AS gpu_index, coalesce(g.uuid, '') AS uuid,
               coalesce(g.product_name, '') AS model_name, e.deployment_id,
               coalesce(m.name, '') AS deployment, e.xid, count(*) AS count, max(e.at) AS last_at
        FROM inventory_event e
        JOIN inventory_host h ON h.id = e.host_id
        LEFT JOIN inventory_gpu g ON g.id = e.gpu_id
        LEFT JOIN inventory_deployment d ON d.id = e.deployment_id
        LEFT JOIN inventory_servedmodel m ON m.id = d.served_model_id
        WHERE e.at > %s AND e.kind = ANY(%s)
        GROUP BY e.host_id, h.name, h.labels, e.kind, e.gpu_id, g.index, g.uuid,
                 g.product_name, e.deployment_id, m.name, e.xid
        """,
        [since, kinds],
    )


def pending_dead_letters() -> int:
    (row,) = _rows("SELECT count(*) AS n FROM inventory_deadletter WHERE status = 'pending'", [])
    return row["n"]


def card_tenants_now(since: dt.datetime, pressure_since: dt.datetime) -> list[dict]:
    """Every deployment that is not stopped on a watched host, per card it sits on: its
    engine, what its processes held there in the card's newest sample after `since`, its newest
    engine KV usage after `since`, and whether it reported KV pressure after
    `pressure_since`."""
    return _rows(
        f"""
        SELECT dg.gpu_id, d.id AS deployment_id, m.name, m.engine,
               coalesce(p.held, 0) AS held_bytes, e.kv_usage_last AS kv_usage,
               EXISTS (
                   SELECT 1 FROM inventory_event ev
                   WHERE ev.deployment_id = d.id AND ev.kind = 'kv_pressure'
                     AND ev.at > %(pressure_since)s
               ) AS kv_pressure
        FROM inventory_deployment_gpus dg
        JOIN inventory_deployment d ON d.id = dg.deployment_id
        JOIN inventory_host h ON h.id = d.host_id
        JOIN inventory_servedmodel m ON m.id = d.served_model_id
        LEFT JOIN LATERAL (
            -- only the processes the card's newest sample saw: a restarted engine's old PID
            -- is not counted beside its new one
            SELECT sum(ps.used_last) AS held
            FROM inventory_card_sample_newest(
                dg.gpu_id, %(since)s, 'infinity', %(packs)s
            ) newest
            JOIN inventory_process_samples(%(since)s, 'infinity') ps
                ON ps.gpu_id = dg.gpu_id AND ps.ts = newest.ts
            WHERE ps.deployment_id = d.id AND ps.used_last IS NOT NULL
        ) p ON true
        LEFT JOIN LATERAL (
            SELECT s.kv_usage_last
            FROM inventory_engine_sample_newest(d.id, %(since)s, 'infinity', %(packs)s) s
        ) e ON true
        WHERE d.status <> 'stopped' AND {_WATCHED_HOSTS}
        ORDER BY dg.gpu_id, d.id
        """,
        {"since": since, "pressure_since": pressure_since, "packs": packing.packs_may_hold(since)},
    )
