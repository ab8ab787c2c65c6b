"""A scripted few minutes of trouble for the demo, so that `make run` shows alerts firing and
resolving soon after it starts: a card held above 95%, an OOM, an MPS server crash and a
collector that goes quiet; their alerts fire in the first four minutes and resolve by the
seventh (an event's alert holds for its rule's window, five minutes by default).

Times count from the agent's start. The simulator's own random Xids, OOMs and crashes carry on
around them; these only make sure something happens while someone is watching.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["memory_surge", "oom", "mps_crash", "collector_pause"]


@dataclass(frozen=True)
class Incident:
    kind: Kind
    host: str
    start_s: float
    duration_s: float = 0.0
    card: int = 0
    # memory_surge: what the job wants; it holds up to SURGE_FRACTION of what is free beside
    # it, growing into memory freed later. None: SURGE_FRACTION of the free memory at its start.
    want_bytes: int | None = None


DEMO_INCIDENTS = (
    # Something outside the deployments (a stray load test) takes 98% of what card 6's tenants
    # leave, for 2.5 min: on-demand memory, what the card-memory rule watches.
    Incident("memory_surge", "infer-01", start_s=40, duration_s=150, card=6),
    Incident("oom", "a100-node", start_s=45, card=0),
    Incident("mps_crash", "mps-l40s", start_s=50, card=0),
    # Longer than COLLECTOR_STALE_AFTER_S (120 s) without a batch.
    Incident("collector_pause", "mig-h200", start_s=60, duration_s=200),
)

SURGE_FRACTION = 0.98  # of the card's free memory when the surge starts
SURGE_PID = 31337


class IncidentScript:
    def __init__(self, incidents: tuple[Incident, ...], started_at: float) -> None:
        self.incidents = incidents
        self.started_at = started_at
        self._done: set[Incident] = set()
        self._surge_bytes: dict[Incident, int] = {}

    def _active(self, incident: Incident, now: float) -> bool:
        elapsed = now - self.started_at
        return incident.start_s <= elapsed < incident.start_s + incident.duration_s

    def paused(self, host: str, now: float) -> bool:
        """The host's agent sends nothing: its collector looks stale to the console."""
        return any(
            i.kind == "collector_pause" and i.host == host and self._active(i, now)
            for i in self.incidents
        )

    def apply(self, host, now: float) -> None:
        """Bring `host` (a SimulatedHost) in line with the script at wall-clock `now`."""
        elapsed = now - self.started_at
        for incident in self.incidents:
            if incident.host != host.name:
                continue
            if incident.kind == "memory_surge":
                if not self._active(incident, now):
                    self._surge_bytes.pop(incident, None)
                    host.hold_card_memory(incident.card, None, pid=SURGE_PID)
                    continue
                free = host.card_free_bytes(incident.card, excluding_pid=SURGE_PID)
                if incident not in self._surge_bytes:
                    want = incident.want_bytes
                    self._surge_bytes[incident] = want or int(SURGE_FRACTION * free)
                held = min(self._surge_bytes[incident], int(SURGE_FRACTION * free))
                host.hold_card_memory(incident.card, held, pid=SURGE_PID)
            elif incident not in self._done and elapsed >= incident.start_s:
                self._done.add(incident)
                if incident.kind == "oom":
                    host.force_oom(incident.card)
                elif incident.kind == "mps_crash":
                    host.crash_mps_server(incident.card, cause="demo: client fault")
