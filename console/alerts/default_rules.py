"""The rules a new console starts with (installed by migration 0002; editable afterwards).

Each: slug, name, kind, severity, `for` (s), resolve hysteresis (s), repeat interval (s),
parameters, runbook note.
"""

HOUR = 3600.0

DEFAULT_RULES = [
    ("card-memory-95", "Card memory above 95% of total", "card_memory", "critical",
     30, 30, 4 * HOUR, {"used_fraction": 0.95}, "oom-triage"),
    ("headroom-low", "Best card's headroom below 4 GiB", "headroom_low", "warning",
     0, 300, 12 * HOUR, {"min_gib": 4}, "before-adding-a-model"),
    ("fragmentation-red", "Framework fragmentation red on a card with tenants",
     "fragmentation_red", "warning", 60, 300, 12 * HOUR, {}, "defragment-off-peak-reload"),
    ("kv-demand-over-reservation", "Deployment's KV demand above its reservation", "kv_demand",
     "warning", 0, 900, 12 * HOUR, {"window_s": 900}, "kv-reservation"),
    ("copeak-over-capacity", "Co-tenants' joint peak over the card's capacity", "copeak",
     "critical", 0, 900, 4 * HOUR, {"min_tenants": 2}, "kv-reservation"),
    ("p99-over-slo", "P99 latency over SLO for 5 minutes", "p99_over_slo", "warning",
     300, 120, 4 * HOUR, {}, "choosing-isolation"),
    ("interference-flagged", "Interference: tail latency rises with co-tenants' load",
     "interference", "warning", 0, 1800, 24 * HOUR, {}, "choosing-isolation"),
    ("collector-stale", "Collector stale", "collector_stale", "critical",
     0, 0, 4 * HOUR, {"stale_after_s": 120}, ""),
    ("collector-faults-rising", "Collector faults rising", "collector_faults", "warning",
     0, 300, 12 * HOUR, {"window_s": 300, "min_faults": 3}, ""),
    ("ingest-lag", "Ingest lag over 5 minutes", "ingest_lag", "critical",
     0, 60, 2 * HOUR, {"max_lag_s": 300}, ""),
    ("dead-letters", "Dead letters waiting", "dead_letters", "warning",
     0, 0, 12 * HOUR, {"min_count": 1}, ""),
    ("oom", "Out of memory", "event", "critical",
     0, 0, 0, {"event_kind": "oom", "window_s": 300}, "oom-triage"),
    ("process-restart", "Process exited or restarted", "event", "warning",
     0, 0, 0, {"event_kind": "process_restart", "window_s": 300}, ""),
    ("mps-server-down", "MPS server down", "event", "critical",
     0, 0, 0, {"event_kind": "mps_server_down", "window_s": 300}, "mps-server-crash"),
    ("xid-hardware", "Xid: hardware, firmware or NVLink fault", "event", "critical",
     0, 0, 0, {"event_kind": "xid", "window_s": 900, "xid_classes": ["hardware"]}, ""),
    ("xid-memory", "Xid: ECC or row remapping", "event", "warning",
     0, 0, 0, {"event_kind": "xid", "window_s": 900, "xid_classes": ["memory"]}, ""),
    ("xid-application", "Xid: application fault", "event", "info",
     0, 0, 0, {"event_kind": "xid", "window_s": 300, "xid_classes": ["application", "other"]},
     ""),
    ("gpu-lost", "GPU lost", "event", "critical",
     0, 0, 4 * HOUR, {"event_kind": "gpu_lost", "window_s": 900}, ""),
]  # fmt: skip
