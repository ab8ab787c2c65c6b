"""One simulated GPU host: deployments on cards, stepped on an explicit simulated clock.

The host owns a `FakeHostState` and keeps it current, so a `FakeNvml` over that state reads
what a real NVML would read on such a host at that simulated time. Besides NVML, the host emits
the events a real host's agents would report (OOM with a per-process snapshot, MPS server down,
process restarts) and serves each deployment's engine metrics (see engine_render).

Memory model, per card (or per MIG GPU instance, which has its own memory):
  process used (NVML) = CUDA context + allocator reserved
  allocator reserved  = weights + workspace + KV reservation + spill high-water + split blocks
Demand above a deployment's KV reservation is either queued (admission policy "queue", no
memory) or spilled into dynamic allocations; a spill that does not fit in what the card has
left is an OOM: the process dies, its memory is freed, it reloads `restart_s` later.

Interference: processes time-slicing one card's SMs slow each other in proportion to the
co-tenants' load; MPS clients share SMs spatially (weaker coupling); separate MIG compute
instances do not share SMs. A small host-wide term (PCIe, CPU) remains everywhere.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Literal

from inventory.telemetry.fake_nvml import (
    NVML_COMPUTEMODE_DEFAULT,
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
    NVML_ERROR_NOT_FOUND,
    FakeHostState,
    FakeProcess,
)
from inventory.telemetry.readings import TelemetryEvent
from inventory.telemetry.simulator.allocator import CachingAllocator
from inventory.telemetry.simulator.catalogue import (
    MigSlice,
    build_card,
    gpu_type,
    mig_uuid,
)
from inventory.telemetry.simulator.latency import LatencyHistogram
from inventory.telemetry.simulator.noise import ValueNoise, stream_id, uniform
from inventory.telemetry.simulator.workload import DiurnalTraffic, Workload

_MIB = 1024 * 1024
_EVENT_BUFFER = 4096  # events not drained by then are dropped oldest-first: memory stays flat
_MPS_SERVER_BYTES = 66 * _MIB  # nvidia-cuda-mps-server on an H200, driver 580 (docs/gpu-check.md)
_MPS_RESTART_S = 30.0
_LOST_CARD_RECOVERY_S = 3600.0  # an Xid 79 card comes back after a reset/reboot, an hour later
_REPLICA_IMBALANCE_SIGMA = 0.06
_MAX_RESTART_BACKOFF_S = 3600.0  # a supervisor backs off reloads that keep failing
_SLOW_START_S = 600.0  # load balancers are never perfectly even

# Interference coefficients (seconds of added median latency per unit of co-tenant load),
# calibrated on the 8-card scenario's field report: ~300 ms spikes when time-sliced, <50 ms
# when each model has its own cards.
TIME_SLICE_S = 0.10
MPS_S = 0.030
HOST_WIDE_S = 0.006
SELF_LOAD_FACTOR = 0.35  # a deployment at its P95 load is 35% slower than idle
MPS_CAP_SLOWDOWN = 0.5  # at a 0% thread cap a client would run 50% slower (small models)
_BURST_FRACTION = 0.3
_BURST_HIT = 2.0
_BURST_MISS = (1.0 - _BURST_FRACTION * _BURST_HIT) / (1.0 - _BURST_FRACTION)

PROCESS_NAMES = {
    "vllm": "/usr/bin/python3",
    "sglang": "/usr/bin/python3",
    "tgi": "/opt/conda/bin/python3.11",
    "tei": "/usr/local/bin/text-embeddings-router",
    "ollama": "/usr/bin/ollama",
}

# Xid mix for the rare hardware/application faults (relative weights) and what each does.
XID_WEIGHTS = (
    (13, 15),
    (31, 20),
    (43, 10),
    (48, 5),
    (63, 15),
    (64, 5),
    (74, 10),
    (79, 10),
    (94, 5),
    (95, 5),
)
_XID_KILLS_ONE = {13, 31, 43, 94}
_XID_KILLS_CARD = {48, 95}
_XID_LOSES_CARD = {79}


def _sm_share(spec: DeploymentSpec) -> float:
    """The fraction of SMs a process may use: its MPS active thread percentage, else all."""
    if spec.mps_thread_percentage is None:
        return 1.0
    return spec.mps_thread_percentage / 100.0


def _weighted_xid(pick: float) -> int:
    for xid, weight in XID_WEIGHTS:
        pick -= weight
        if pick < 0:
            return xid
    return XID_WEIGHTS[-1][0]


@dataclass(frozen=True, slots=True)
class CardSpec:
    gpu_type: str
    mig_layout: tuple[MigSlice, ...] | None = None
    mps: bool = False  # an MPS control daemon serves this card (compute mode exclusive)


@dataclass(frozen=True, slots=True)
class DeploymentSpec:
    deployment_id: str
    workload: Workload
    cards: tuple[int, ...]  # one process per card (tensor-parallel group)
    kv_reservation_bytes: int  # this replica's KV reservation, all its cards together
    admission: Literal["queue"] | None = None  # None: demand above the reservation spills
    traffic_share: float = 1.0  # share of the model's traffic when it has several replicas
    mig_slice: MigSlice | None = None
    mps_thread_percentage: int | None = None
    containerized: bool = False  # PIDs in another namespace: NVML cannot name them
    memory_visible: bool = True  # False: NVML reports usedGpuMemory as not available
    metrics_generation: Literal["v0", "v1"] = "v1"  # vLLM metric names

    @property
    def tensor_parallel(self) -> int:
        return len(self.cards)


@dataclass(frozen=True, slots=True)
class HostSpec:
    name: str
    cards: tuple[CardSpec, ...]
    deployments: tuple[DeploymentSpec, ...]
    xid_per_card_day: float = 0.02
    mps_crash_per_card_day: float = 0.0
    # "auto": the control daemon starts a fresh server by itself after a crash; "manual": the
    # server stays down, and its clients with it, until someone runs `mps_restart`.
    mps_recovery: Literal["auto", "manual"] = "auto"
    # Scheduled crashes: (card index, simulated time in s), for demos and tests.
    mps_crashes_at: tuple[tuple[int, float], ...] = ()


@dataclass(slots=True, eq=False)
class _Domain:
    """Memory that processes compete for: a whole card, or one MIG GPU instance."""

    card_index: int
    gpu_instance_id: int | None
    capacity_bytes: int
    mig_device_uuid: str | None
    shards: list[_Shard] = field(default_factory=list)

    def used_bytes(self) -> int:
        return sum(s.used_bytes for s in self.shards if s.replica.up)


@dataclass(slots=True, eq=False)
class _Shard:
    replica: SimulatedReplica
    card_index: int
    domain: _Domain
    sm_key: tuple  # who shares SMs: (card,) time-sliced, (card, "mps"), (card, gi, ci)
    allocator: CachingAllocator
    process: FakeProcess | None = None

    @property
    def used_bytes(self) -> int:
        return self.replica.spec.workload.context_bytes + self.allocator.reserved_bytes


@dataclass(slots=True, eq=False)
class SimulatedReplica:
    spec: DeploymentSpec
    static_per_shard: int
    shards: list[_Shard] = field(default_factory=list)
    up: bool = False
    restart_at: float = 0.0
    restart_reason: str = "start"
    stopped: bool = False  # stopped by a host action: stays down until started
    load_failures: int = 0
    restarts: int = 0
    concurrency: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    activity: float = 0.0
    latency_median_s: float = 0.0
    interference_s: float = 0.0
    histogram: LatencyHistogram = field(default_factory=LatencyHistogram)
    requests_total: float = 0.0
    generation_tokens_total: float = 0.0
    # What the replica served across its restarts (the engine's own counters above restart
    # with it): the truth a rehearsal's figures are checked against.
    served_histogram: LatencyHistogram = field(default_factory=LatencyHistogram)
    served_total: float = 0.0
    started_at: float = 0.0
    imbalance: ValueNoise | None = None
    # Requests a load test has in flight on its endpoint (simulator/endpoints.py), on top of
    # the scenario's traffic.
    extra_concurrency: float = 0.0

    @property
    def pids(self) -> list[int]:
        return [s.process.pid for s in self.shards if s.process is not None]


@dataclass(slots=True)
class HostStats:
    """Counters for calibration and tests; `window_*` reset with `reset_window`."""

    oom_events: int = 0
    restarts: int = 0
    xids: int = 0
    mps_crashes: int = 0
    window_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    window_interference_max_s: float = 0.0
    window_ooms: int = 0


class SimulatedHost:
    def __init__(self, spec: HostSpec, seed: int, epoch: float = 0.0) -> None:
        self.spec = spec
        self.name = spec.name
        self.seed = seed
        self.epoch = epoch
        self.t = 0.0
        self.stats = HostStats()
        self._events: deque[TelemetryEvent] = deque(maxlen=_EVENT_BUFFER)
        self._next_pid = 1000 + int(uniform(seed, stream_id(spec.name, "pid"), 0) * 50_000)
        self._pid_stream = stream_id(spec.name, "pid-step")
        self._pid_count = 0
        self.state = FakeHostState(cards=[], driver_version="")
        self._lost_until: dict[int, float] = {}
        self._mps_servers: dict[int, FakeProcess] = {}
        self._mps_down: set[int] = set()  # cards whose MPS server is down (manual recovery)
        self._mps_crashes_done: set[tuple[int, float]] = set()
        self._build_cards()
        self._traffic: dict[str, DiurnalTraffic] = {}
        self.replicas: list[SimulatedReplica] = []
        self._build_replicas()
        self._xid_slot: list[int] = [-1] * len(spec.cards)
        self._xid_pending: list[tuple[float, int] | None] = [None] * len(spec.cards)
        self._mps_slot: list[int] = [-1] * len(spec.cards)
        self._mps_pending: list[float | None] = [None] * len(spec.cards)
        for replica in self.replicas:
            self._start(replica, 0.0)
        self._refresh_cards()

    # public ------------------------------------------------------------------------------

    def now_epoch(self) -> float:
        return self.epoch + self.t

    def advance_to(self, t: float, max_step_s: float = 1.0) -> None:
        """Step the host to simulated time t (seconds since the scenario start)."""
        while self.t < t - 1e-9:
            dt = min(max_step_s, t - self.t)
            self._tick(self.t + dt, dt)

    def drain_events(self) -> list[TelemetryEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    def replica(self, deployment_id: str) -> SimulatedReplica:
        for replica in self.replicas:
            if replica.spec.deployment_id == deployment_id:
                return replica
        raise KeyError(deployment_id)

    def reset_window(self) -> HostStats:
        """Hand back the window's stats (latency, interference, OOMs) and start a new one."""
        window = self.stats
        self.stats = HostStats(window.oom_events, window.restarts, window.xids, window.mps_crashes)
        return window

    def allocator_stats(self, deployment_id: str) -> list[dict]:
        """Per process of a deployment: torch.cuda.memory_stats() subset + largest free block."""
        replica = self.replica(deployment_id)
        return [
            {
                "pid": shard.process.pid,
                "card_index": shard.card_index,
                "memory_stats": shard.allocator.memory_stats(),
                "largest_free_block_bytes": shard.allocator.largest_free_block_bytes,
            }
            for shard in replica.shards
            if shard.process is not None
        ]

    def deployment_plan(self) -> list[dict]:
        """What a deployment agent knows: devices, current PIDs, name pattern, metrics URL."""
        plan = []
        for replica in self.replicas:
            spec = replica.spec
            if spec.mig_slice is not None:
                devices = [mig_uuid(self.name, c, spec.mig_slice) for c in spec.cards]
            else:
                devices = [self.state.cards[c].uuid for c in spec.cards]
            plan.append(
                {
                    "deployment_id": spec.deployment_id,
                    "device_uuids": devices,
                    "process_name_pattern": re.escape(PROCESS_NAMES[spec.workload.engine]),
                    "mps_active_thread_percentage": spec.mps_thread_percentage,
                    "pids": replica.pids if replica.up else [],
                    "engine": spec.workload.engine,
                    "metrics_url": self.metrics_url(spec),
                    "model_name": spec.workload.model,
                }
            )
        return plan

    def metrics_url(self, spec: DeploymentSpec) -> str:
        if spec.workload.engine == "ollama":
            return f"sim://{self.name}/ollama/api/ps"
        return f"sim://{self.name}/{spec.deployment_id}/metrics"

    def crash_mps_server(self, card_index: int, cause: str = "client fault") -> None:
        """MPS is not fault isolation: one client's fatal fault takes every client down."""
        clients = [
            shard
            for replica in self.replicas
            if replica.up
            for shard in replica.shards
            if shard.card_index == card_index and shard.sm_key[-1] == "mps"
        ]
        victims = {shard.replica for shard in clients}
        self.stats.mps_crashes += 1
        self._emit(
            "mps_server_down",
            card_index,
            {
                "cause": cause,
                "clients": [
                    {"pid": s.process.pid, "deployment_id": s.replica.spec.deployment_id}
                    for s in clients
                    if s.process is not None
                ],
            },
        )
        server = self._mps_servers.get(card_index)
        if server is not None and self.spec.mps_recovery == "manual":
            self._mps_down.add(card_index)
            processes = self.state.cards[card_index].processes
            if server in processes:
                processes.remove(server)
        elif server is not None:
            server.pid = self._new_pid()  # the control daemon starts a fresh server
        for replica in sorted(victims, key=lambda r: r.spec.deployment_id):
            self._take_down(replica, self.t, "mps_server_down", extra_delay_s=_MPS_RESTART_S)

    # host actions (what an actions file's `simulated = true` runs) --------------------------

    def restart_deployment(self, deployment_id: str, kv_reservation_bytes: int | None = None):
        """Restart a deployment, with a new KV reservation if one is given (reload_with)."""
        replica = self.replica(deployment_id)
        if kv_reservation_bytes is not None:
            self._resize(replica, kv_reservation_bytes)
        self._take_down(replica, self.t, "action")
        replica.stopped = False

    def kv_bytes_for_fraction(self, deployment_id: str, mem_fraction: float) -> int:
        """The KV reservation that a memory fraction leaves (as vLLM's
        --gpu-memory-utilization does): the fraction of the card minus weights and workspace."""
        replica = self.replica(deployment_id)
        spec, shard = replica.spec, replica.shards[0]
        workload = spec.workload
        per_shard = (
            mem_fraction * shard.domain.capacity_bytes
            - workload.context_bytes
            - workload.weights_bytes // spec.tensor_parallel
            - workload.workspace_bytes
        )
        return max(0, int(per_shard)) * spec.tensor_parallel

    def stop_deployment(self, deployment_id: str) -> None:
        replica = self.replica(deployment_id)
        self._take_down(replica, self.t, "action")
        replica.stopped = True

    def start_deployment(self, deployment_id: str) -> None:
        replica = self.replica(deployment_id)
        replica.stopped = False
        if not replica.up:
            replica.restart_at = self.t

    def restart_mps_server(self, card_index: int) -> list[str]:
        """Restart the card's MPS control daemon: a fresh server; clients still up die with
        the old one. Returns the deployments whose clients will come back."""
        server = self._mps_servers.get(card_index)
        if server is None:
            raise KeyError(f"card {card_index} runs no MPS server")
        clients = [r for r in self.replicas if any(s.card_index == card_index for s in r.shards)]
        for replica in clients:
            self._take_down(replica, self.t, "mps_restart")
        processes = self.state.cards[card_index].processes
        if server in processes:
            processes.remove(server)
        server.pid = self._new_pid()
        processes.insert(0, server)
        self._mps_down.discard(card_index)
        for replica in clients:
            replica.restart_at = min(replica.restart_at, self.t + replica.spec.workload.restart_s)
        return [r.spec.deployment_id for r in clients if not r.stopped]

    def _resize(self, replica: SimulatedReplica, kv_reservation_bytes: int) -> None:
        spec = replace(replica.spec, kv_reservation_bytes=int(kv_reservation_bytes))
        workload = spec.workload
        replica.spec = spec
        replica.static_per_shard = (
            workload.weights_bytes // spec.tensor_parallel
            + workload.workspace_bytes
            + spec.kv_reservation_bytes // spec.tensor_parallel
        )

    def restart_replica(self, deployment_id: str) -> None:
        """Stop a replica and load it again at the next step, as an operator's restart does
        (a load test's simultaneous cold start)."""
        replica = self.replica(deployment_id)
        self._take_down(replica, self.t, "restart", restart_s=0.0)

    def lose_card(self, card_index: int) -> None:
        """Xid 79: the card fell off the bus; every process using it dies with it."""
        self.state.cards[card_index].lost = True
        self._lost_until[card_index] = self.t + _LOST_CARD_RECOVERY_S
        for replica in list(self.replicas):
            if replica.up and card_index in replica.spec.cards:
                self._take_down(replica, self.t, "gpu_lost", restart_s=_LOST_CARD_RECOVERY_S)

    # construction ------------------------------------------------------------------------

    def _build_cards(self) -> None:
        cards = []
        for index, card_spec in enumerate(self.spec.cards):
            gpu = gpu_type(card_spec.gpu_type)
            mode = NVML_COMPUTEMODE_EXCLUSIVE_PROCESS if card_spec.mps else NVML_COMPUTEMODE_DEFAULT
            card = build_card(gpu, self.name, index, card_spec.mig_layout, mode)
            if card_spec.mps:
                server = FakeProcess(self._new_pid(), "nvidia-cuda-mps-server", _MPS_SERVER_BYTES)
                self._mps_servers[index] = server
                card.processes.append(server)
            cards.append(card)
        self.state.cards = cards
        self.state.driver_version = gpu_type(self.spec.cards[0].gpu_type).driver_version
        self._domains: dict[tuple[int, int | None], _Domain] = {}
        for index, card_spec in enumerate(self.spec.cards):
            gpu = gpu_type(card_spec.gpu_type)
            card = cards[index]
            if card_spec.mig_layout:
                for mig in card.mig_devices:
                    key = (index, mig.gpu_instance_id)
                    if key not in self._domains:
                        self._domains[key] = _Domain(
                            index,
                            mig.gpu_instance_id,
                            mig.total_bytes - mig.base_used_bytes,
                            mig.uuid,
                        )
            else:
                capacity = gpu.usable_bytes - (_MPS_SERVER_BYTES if card_spec.mps else 0)
                self._domains[(index, None)] = _Domain(index, None, capacity, None)

    def _build_replicas(self) -> None:
        for spec in self.spec.deployments:
            workload = spec.workload
            if workload.model not in self._traffic:
                self._traffic[workload.model] = DiurnalTraffic(
                    workload.traffic, self.seed, f"{self.name}/{workload.model}"
                )
            tp = spec.tensor_parallel
            static = (
                workload.weights_bytes // tp
                + workload.workspace_bytes
                + spec.kv_reservation_bytes // tp
            )
            replica = SimulatedReplica(spec, static)
            replica.imbalance = ValueNoise(
                self.seed, stream_id(self.name, spec.deployment_id, "balance"), 600.0
            )
            for card_index in spec.cards:
                if spec.mig_slice is not None:
                    domain = self._domains[(card_index, spec.mig_slice.gpu_instance_id)]
                    sm_key: tuple = (
                        card_index,
                        spec.mig_slice.gpu_instance_id,
                        spec.mig_slice.compute_instance_id,
                    )
                else:
                    domain = self._domains[(card_index, None)]
                    sm_key = (
                        (card_index, "mps") if self.spec.cards[card_index].mps else (card_index,)
                    )
                shard = _Shard(replica, card_index, domain, sm_key, CachingAllocator(static))
                domain.shards.append(shard)
                replica.shards.append(shard)
            self.replicas.append(replica)

    # stepping ----------------------------------------------------------------------------

    def _tick(self, t: float, dt: float) -> None:
        self.t = t
        self._fire_scheduled(t)
        self._update_load(t)
        self._update_memory(t, dt)
        self._update_latency(dt)
        self._refresh_cards()

    def _fire_scheduled(self, t: float) -> None:
        for card_index, until in list(self._lost_until.items()):
            if t >= until:
                del self._lost_until[card_index]
                self.state.cards[card_index].lost = False
        for replica in self.replicas:
            if not replica.up and not replica.stopped and t >= replica.restart_at:
                if any(s.card_index in self._mps_down for s in replica.shards):
                    continue  # an MPS client cannot start while its server is down
                self._start(replica, t)
        for scheduled in self.spec.mps_crashes_at:
            if scheduled not in self._mps_crashes_done and t >= scheduled[1]:
                self._mps_crashes_done.add(scheduled)
                self.crash_mps_server(scheduled[0], cause="client fault (scheduled)")
        rate_per_hour = self.spec.xid_per_card_day / 24.0
        for card_index in range(len(self.spec.cards)):
            self._maybe_xid(card_index, t, rate_per_hour)
            if self.spec.cards[card_index].mps and self.spec.mps_crash_per_card_day > 0:
                self._maybe_mps_crash(card_index, t)

    def _maybe_xid(self, card_index: int, t: float, rate_per_hour: float) -> None:
        hour = int(t // 3600)
        if hour != self._xid_slot[card_index]:
            self._xid_slot[card_index] = hour
            stream = stream_id(self.name, card_index, "xid")
            self._xid_pending[card_index] = None
            if uniform(self.seed, stream, 3 * hour) < rate_per_hour:
                when = (hour + uniform(self.seed, stream, 3 * hour + 1)) * 3600.0
                pick = uniform(self.seed, stream, 3 * hour + 2) * sum(w for _, w in XID_WEIGHTS)
                self._xid_pending[card_index] = (when, _weighted_xid(pick))
        pending = self._xid_pending[card_index]
        if pending is not None and t >= pending[0]:
            self._xid_pending[card_index] = None
            if not self.state.cards[card_index].lost:
                self.raise_xid(card_index, pending[1])

    def raise_xid(self, card_index: int, xid: int) -> None:
        """An Xid on a card: posted to NVML event sets, with the effect the Xid has."""
        self.stats.xids += 1
        shards = [
            s
            for r in self.replicas
            if r.up
            for s in r.shards
            if s.card_index == card_index and s.process is not None
        ]
        victim = None
        if shards:
            pick = uniform(self.seed, stream_id(self.name, "xid-victim"), int(self.t))
            victim = shards[int(pick * len(shards))]
        gi = ci = None
        if victim is not None and victim.replica.spec.mig_slice is not None:
            gi = victim.replica.spec.mig_slice.gpu_instance_id
            ci = victim.replica.spec.mig_slice.compute_instance_id
        self.state.post_xid(card_index, xid, gi, ci)
        if xid in _XID_LOSES_CARD:
            self.lose_card(card_index)
        elif xid in _XID_KILLS_CARD:
            for replica in dict.fromkeys(s.replica for s in shards):  # ordered, unique
                self._take_down(replica, self.t, f"xid {xid}")
        elif xid in _XID_KILLS_ONE and victim is not None:
            if victim.sm_key[-1] == "mps":
                self.crash_mps_server(card_index, cause=f"xid {xid} in client {victim.process.pid}")
            else:
                self._take_down(victim.replica, self.t, f"xid {xid}")

    def _maybe_mps_crash(self, card_index: int, t: float) -> None:
        day = int(t // 86_400)
        if day != self._mps_slot[card_index]:
            self._mps_slot[card_index] = day
            stream = stream_id(self.name, card_index, "mps-crash")
            self._mps_pending[card_index] = None
            if uniform(self.seed, stream, 2 * day) < self.spec.mps_crash_per_card_day:
                self._mps_pending[card_index] = (
                    day + uniform(self.seed, stream, 2 * day + 1)
                ) * 86_400
        pending = self._mps_pending[card_index]
        if pending is not None and t >= pending:
            self._mps_pending[card_index] = None
            self.crash_mps_server(card_index, cause="client fault (scheduled)")

    def _update_load(self, t: float) -> None:
        # A dead replica's share is not moved to its siblings: its clients see errors until it
        # is back (health checks lag a reload), which keeps one OOM from cascading.
        model_load = {model: traffic(t) for model, traffic in self._traffic.items()}
        for replica in self.replicas:
            spec = replica.spec
            if not replica.up:
                replica.concurrency = replica.running = replica.waiting = replica.activity = 0.0
                continue
            model = spec.workload.model
            imbalance = math.exp(_REPLICA_IMBALANCE_SIGMA * replica.imbalance(t))
            # load balancers bring a restarted backend in slowly
            ramp = min(1.0, (t - replica.started_at) / _SLOW_START_S) if replica.restarts else 1.0
            replica.concurrency = model_load[model] * spec.traffic_share * imbalance * ramp
            replica.concurrency += max(0.0, replica.extra_concurrency)
            p95_here = spec.workload.traffic.p95_concurrency * spec.traffic_share
            replica.activity = min(1.5, replica.concurrency / p95_here)

    def _update_memory(self, t: float, dt: float) -> None:
        used = {domain: domain.used_bytes() for domain in self._domains.values()}
        for replica in self.replicas:
            if not replica.up:
                continue
            spec = replica.spec
            per_request = spec.workload.kv_bytes_per_request
            pool = spec.kv_reservation_bytes
            if per_request == 0:  # no KV cache: nothing to admit requests against
                replica.running, replica.waiting = replica.concurrency, 0.0
                spill = 0.0
            elif spec.admission == "queue":
                admitted = min(replica.concurrency, pool / per_request)
                replica.running, replica.waiting = admitted, replica.concurrency - admitted
                spill = 0.0
            else:
                replica.running, replica.waiting = replica.concurrency, 0.0
                spill = max(0.0, replica.concurrency * per_request - pool)
            replica.kv_usage = min(1.0, replica.running * per_request / pool) if pool else 0.0
            spill_per_shard = int(spill / spec.tensor_parallel)
            for shard in replica.shards:
                allocator = shard.allocator
                domain = shard.domain
                before = allocator.reserved_bytes
                growth = allocator.growth_needed(spill_per_shard)
                if growth and growth > domain.capacity_bytes - used[domain]:
                    self._oom(replica, shard, growth, domain.capacity_bytes - used[domain])
                    for other in replica.shards:
                        used[other.domain] -= other.used_bytes
                    break
                allocator.set_spill(spill_per_shard)
                allocator.drift(dt, replica.activity, domain.capacity_bytes - used[domain] - growth)
                used[domain] += allocator.reserved_bytes - before

    def _update_latency(self, dt: float) -> None:
        # SM pressure per SM domain; an MPS client weighs by its active thread percentage
        load_on: dict[tuple, float] = {}
        host_load = 0.0
        for replica in self.replicas:
            if replica.up:
                host_load += replica.activity
                pressure = replica.activity * _sm_share(replica.spec)
                for shard in replica.shards:
                    load_on[shard.sm_key] = load_on.get(shard.sm_key, 0.0) + pressure
        window = self.stats.window_latency
        for replica in self.replicas:
            if not replica.up:
                continue
            tp = replica.spec.tensor_parallel
            own = replica.activity * _sm_share(replica.spec)
            contention = 0.0
            for shard in replica.shards:
                others = load_on[shard.sm_key] - own
                coupling = MPS_S if shard.sm_key[-1] == "mps" else TIME_SLICE_S
                if len(shard.sm_key) == 3:  # its own MIG compute instance: no SM sharing
                    coupling = 0.0
                contention += coupling * others
            interference = contention / tp + HOST_WIDE_S * (host_load - replica.activity)
            workload = replica.spec.workload
            # an MPS thread cap slows the client even alone (fewer SMs for its kernels)
            capped = 1.0 + MPS_CAP_SLOWDOWN * (1.0 - _sm_share(replica.spec))
            service = workload.base_latency_s * capped * (1.0 + SELF_LOAD_FACTOR * replica.activity)
            queueing = service * replica.waiting / max(1.0, replica.running)
            median = service + interference + queueing
            replica.latency_median_s, replica.interference_s = median, interference
            completed = replica.running * dt / median
            # Interference is bursty: the requests that meet a co-tenant's burst take twice the
            # average hit, the others less; the mean is kept, the tail gets heavier.
            hit = service + queueing + _BURST_HIT * interference
            missed = service + queueing + _BURST_MISS * interference
            for latency, requests in (
                (hit, completed * _BURST_FRACTION),
                (missed, completed * (1.0 - _BURST_FRACTION)),
            ):
                replica.histogram.add(latency, requests)
                replica.served_histogram.add(latency, requests)
                window.add(latency, requests)
            replica.requests_total += completed
            replica.served_total += completed
            replica.generation_tokens_total += completed * workload.tokens_per_request * 0.25
            if interference > self.stats.window_interference_max_s:
                self.stats.window_interference_max_s = interference

    def _refresh_cards(self) -> None:
        cards = self.state.cards
        for card in cards:
            card.util_gpu = card.util_memory = 0
        for replica in self.replicas:
            for shard in replica.shards:
                process = shard.process
                if process is not None:
                    process.used_bytes = shard.used_bytes
                    card = cards[shard.card_index]
                    busy = 0.05 + 0.9 * min(1.0, replica.activity)
                    card.util_gpu = min(100, card.util_gpu + round(100 * busy))
                    card.util_memory = min(100, card.util_memory + round(35 * busy))

    # scripted incidents (inventory.telemetry.simulator.incidents) -------------------------

    def card_free_bytes(self, card_index: int, *, excluding_pid: int) -> int:
        """What NVML says the card has free, not counting what process `excluding_pid`
        holds."""
        card = self.state.cards[card_index]
        held = sum(p.used_bytes for p in card.processes if p.pid == excluding_pid)
        return max(0, card.total_bytes - card.reserved_bytes - card.used_bytes() + held)

    def hold_card_memory(self, card_index: int, held_bytes: int | None, *, pid: int) -> None:
        """A process outside the deployments holds `held_bytes` of the card (at most what is
        free beside it); None: that process has exited."""
        card = self.state.cards[card_index]
        card.processes[:] = [p for p in card.processes if p.pid != pid]
        if held_bytes is None:
            return
        held = min(held_bytes, card.total_bytes - card.reserved_bytes - card.used_bytes())
        if held > 0:
            card.processes.append(FakeProcess(pid, "python3 memtest.py", held))

    def force_oom(self, card_index: int) -> None:
        """The first serving replica on the card asks for more than the card has left."""
        for replica in self.replicas:
            for shard in replica.shards:
                if replica.up and shard.card_index == card_index and shard.process is not None:
                    free = shard.domain.capacity_bytes - shard.domain.used_bytes()
                    self._oom(replica, shard, free + 1024 * _MIB, free)
                    return

    # lifecycle ---------------------------------------------------------------------------

    def _start(self, replica: SimulatedReplica, t: float) -> None:
        spec = replica.spec
        for shard in replica.shards:
            if self.state.cards[shard.card_index].lost:
                replica.restart_at = t + spec.workload.restart_s
                return
        fresh = [CachingAllocator(replica.static_per_shard) for _ in replica.shards]
        for shard in replica.shards:
            free = shard.domain.capacity_bytes - shard.domain.used_bytes()
            need = spec.workload.context_bytes + replica.static_per_shard
            if need > free:
                # the weights do not fit any more: a load-time OOM, try again later
                self._record_oom(replica, shard, need, free, phase="load")
                replica.load_failures += 1
                backoff = min(_MAX_RESTART_BACKOFF_S, 2.0**replica.load_failures * 60.0)
                replica.restart_at = t + spec.workload.restart_s + backoff
                return
        replica.load_failures = 0
        old_pids = replica.pids
        for shard, allocator in zip(replica.shards, fresh, strict=True):
            shard.allocator = allocator
            sm_mps = shard.sm_key[-1] == "mps"
            gi = spec.mig_slice.gpu_instance_id if spec.mig_slice else None
            ci = spec.mig_slice.compute_instance_id if spec.mig_slice else None
            shard.process = FakeProcess(
                pid=self._new_pid(),
                name=PROCESS_NAMES[spec.workload.engine],
                used_bytes=shard.used_bytes,
                kind="mps" if sm_mps else "compute",
                gpu_instance_id=gi,
                compute_instance_id=ci,
                memory_visible=spec.memory_visible,
                name_error=NVML_ERROR_NOT_FOUND if spec.containerized else None,
            )
            self.state.cards[shard.card_index].processes.append(shard.process)
        replica.up = True
        replica.started_at = t
        if replica.restart_reason != "start":
            replica.restarts += 1
        replica.histogram = LatencyHistogram()  # the engine's counters restart with it
        replica.requests_total = replica.generation_tokens_total = 0.0
        if replica.restart_reason != "start":
            self.stats.restarts += 1
            self._emit(
                "process_restart",
                replica.shards[0].card_index,
                {
                    "deployment_id": spec.deployment_id,
                    "reason": replica.restart_reason,
                    "old_pids": old_pids,
                    "new_pids": replica.pids,
                },
            )

    def _take_down(
        self,
        replica: SimulatedReplica,
        t: float,
        reason: str,
        extra_delay_s: float = 0.0,
        restart_s: float | None = None,
    ) -> None:
        if not replica.up:
            return
        cards = self.state.cards
        for shard in replica.shards:
            if shard.process is not None:
                processes = cards[shard.card_index].processes
                if shard.process in processes:
                    processes.remove(shard.process)
        replica.up = False
        replica.restart_reason = reason
        delay = replica.spec.workload.restart_s if restart_s is None else restart_s
        replica.restart_at = t + delay + extra_delay_s
        replica.concurrency = replica.running = replica.waiting = replica.activity = 0.0

    def _oom(self, replica: SimulatedReplica, shard: _Shard, requested: int, free: int) -> None:
        shard.allocator.num_ooms += 1
        self._record_oom(replica, shard, requested, free, phase="serve")
        self._take_down(replica, self.t, "oom")

    def _record_oom(
        self, replica: SimulatedReplica, shard: _Shard, requested: int, free: int, phase: str
    ):
        domain = shard.domain
        snapshot = [
            {
                "pid": s.process.pid,
                "deployment_id": s.replica.spec.deployment_id,
                "used_bytes": s.used_bytes,
                "allocated_bytes": s.allocator.allocated_bytes,
                "reserved_bytes": s.allocator.reserved_bytes,
                "inactive_split_bytes": int(s.allocator.inactive_split_bytes),
                "largest_free_block_bytes": s.allocator.largest_free_block_bytes,
                "kv_reservation_bytes": s.replica.spec.kv_reservation_bytes
                // s.replica.spec.tensor_parallel,
            }
            for s in domain.shards
            if s.process is not None and s.replica.up
        ]
        self.stats.oom_events += 1
        self.stats.window_ooms += 1
        self._emit(
            "oom",
            shard.card_index,
            {
                "deployment_id": replica.spec.deployment_id,
                "pid": shard.process.pid if shard.process is not None else None,
                "phase": phase,
                "requested_bytes": int(requested),
                "free_bytes": int(free),
                "capacity_bytes": domain.capacity_bytes,
                "mig_device_uuid": domain.mig_device_uuid,
                "processes": snapshot,
            },
        )

    def _emit(self, kind, card_index: int | None, detail: dict) -> None:
        uuid = self.state.cards[card_index].uuid if card_index is not None else None
        self._events.append(TelemetryEvent(self.now_epoch(), kind, card_index, uuid, detail))

    def _new_pid(self) -> int:
        self._pid_count += 1
        step = 1 + int(uniform(self.seed, self._pid_stream, self._pid_count) * 40)
        self._next_pid += step
        return self._next_pid
