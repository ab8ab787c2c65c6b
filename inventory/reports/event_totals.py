"""OOMs and Xids counted over the whole stored event history: the one source of /metrics'
`gpu_console_oom_events_total` and `gpu_console_xid_events_total`.

A count only grows (events are never aged out), so Prometheus reads it as a counter and
`increase()` works across scrapes; the fleet board's "OOMs in 24 h" is another figure
(`inventory.reports.oom`).
"""

from __future__ import annotations

from dataclasses import dataclass

from console.placement.mig import canonical_profile_name
from inventory.models import Event, MigSlice
from inventory.timeseries import queries

COUNTED = (Event.Kind.OOM.value, Event.Kind.XID.value)


@dataclass(frozen=True, slots=True)
class EventTotal:
    counted: queries.EventTotal
    gpu_instance_profile: str  # the GPU instance's profile (3g.71gb); "" for a whole card


def event_totals(host_ids: list[int]) -> list[EventTotal]:
    """Every OOM and Xid count of these hosts, per card, Xid code and MIG GPU instance."""
    counted = queries.event_totals(list(COUNTED), host_ids)
    instances = {(c.gpu_id, c.gpu_instance_id) for c in counted if c.gpu_instance_id is not None}
    profiles = {
        (piece.gpu_id, piece.gpu_instance_id): canonical_profile_name(piece.profile_name)
        for piece in MigSlice.objects.filter(
            gpu_id__in={gpu for gpu, _ in instances}, gpu_instance_id__isnull=False
        )
    }
    return [EventTotal(c, profiles.get((c.gpu_id, c.gpu_instance_id), "")) for c in counted]
