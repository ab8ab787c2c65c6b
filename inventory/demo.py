"""The demo fleet and demo users that `make run` loads.

The fleet is the simulator's own (inventory.telemetry.simulator.scenarios), so the inventory
shown and the telemetry collected describe the same cards, slices and deployments.
"""

from dataclasses import replace

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.dispatch import Signal

from console.core.auditing import Action, snapshot
from console.core.auditing.changes import open_change, record
from console.core.roles import APPROVER, MANAGER, ONCALL
from console.placement.mig_profiles import CATALOGUE as MIG_CATALOGUE
from inventory.analytics.kv import POLICY_BUFFER_MAX, POLICY_BUFFER_MIN
from inventory.collection import SIMULATOR_QUEUE, agent_queue
from inventory.models import Deployment, Gpu, Host, MigSlice, ServedModel
from inventory.services import do_set_model_priority
from inventory.telemetry.simulator.catalogue import MIB, device_uuid, gpu_type, mig_uuid
from inventory.telemetry.simulator.host import DeploymentSpec, HostSpec
from inventory.telemetry.simulator.operations_scenario import operations_host
from inventory.telemetry.simulator.scenarios import before_host, demo_fleet_specs

DEMO_ROLES = {"oncall": ONCALL, "approver": APPROVER, "manager": MANAGER}
# The 8-card host that starts as the field report found it (inventory.demo_history switches it
# to card groups through proposals, half-way through its history).
SWITCHED_HOST = "infer-01"
# Sent by the seed with hosts (the names of the demo hosts it created) once they and the demo
# users exist, before any history: what waits for the approver without resting on history is
# filed then (console.proposals.demo; inventory sits below it), so it is there from the start.
fleet_seeded = Signal()

_ENGINES = {engine.value: engine for engine in ServedModel.Engine}
_DTYPES = {1: "fp8_e4m3", 2: "bf16", 4: "fp32"}
# The simulator's card types, as the MIG catalogue names the same geometry.
_MIG_TYPES = {"H200": "H200-141GB", "H100-SXM5-80GB": "H100-80GB", "A100-SXM4-80GB": "A100-80GB"}

_DESCRIPTIONS = {
    "infer-00": "The 8-card server as the field report found it: three models time-sharing "
    "all eight cards, KV reserved at mean concurrency, no admission policy.",
    "infer-01": "The same server, fixed half-way through its history by three proposals: "
    "each model bound to its own card group, KV reserved at P95 concurrency plus 20%, the "
    "excess queued.",
    "ops-a100": "The field report's 3 x A100 pool with its operations: card 0 at 96% gets its "
    "batch model's KV shrunk, card 1's MPS server crashes and is restarted, card 2's "
    "fragmented model is reloaded off-peak.",
}
# The operations demo's priorities: the chat model matters most, the batch model least.
OPERATIONS_PRIORITIES = {"chat-70b-awq": 1, "batch-8b": 3}


def ensure_demo_users(password: str) -> list[str]:
    """Create the demo logins that do not exist yet; never touch an existing account."""
    users = get_user_model()
    created = []
    with open_change():
        for username, role in DEMO_ROLES.items():
            if users.objects.filter(username=username).exists():
                continue
            user = users.objects.create_user(username, password=password)
            user.groups.add(Group.objects.get(name=role))
            _record_seeded(user, {"username": username, "groups": [role]})
            created.append(username)
        if not users.objects.filter(username="admin").exists():
            admin = users.objects.create_superuser("admin", "admin@localhost", password)
            _record_seeded(admin, {"username": "admin", "is_superuser": True})
            created.append("admin")
    return created


def ensure_demo_fleet() -> list[str]:
    """Create the demo hosts that do not exist yet; a host already there is left as it is."""
    created = []
    with open_change():
        for spec in demo_fleet_specs():
            if Host.objects.filter(name=spec.name).exists():
                continue
            if spec.name == SWITCHED_HOST:
                spec = replace(before_host(xid_per_card_day=0.02), name=spec.name)
            host = _create_host(spec)
            _record_seeded(host, snapshot(host), host=host,
                           comment=f"{host.gpus.count()} cards, "
                           f"{host.deployments.count()} deployments")  # fmt: skip
            created.append(spec.name)
    return created


def demo_fleet_secrets() -> dict[str, str]:
    """Host name to secret of every host the demo fleet's simulator agent collects, for its
    AGENT_SECRET_FILE: it signs their batches as a real agent signs its host's, so the demo
    passes the same check (inventory.ingest.signatures) that real hosts do."""
    return {
        host.name: host.agent_secret
        for host in Host.objects.filter(collector=Host.Collector.SIMULATED)
        if agent_queue(host) == SIMULATOR_QUEUE and host.holds_secret
    }


def ensure_operations_host() -> Host | None:
    """The operations demo's host (inventory.telemetry.simulator.operations_scenario), collected
    by a simulator agent of its own (its `simulator` label, inventory.collection); None when it
    exists already."""
    spec = operations_host()
    if Host.objects.filter(name=spec.name).exists():
        return None
    with open_change():
        # Its agent serves no inference endpoints (the demo fleet's agent has the port).
        host = _create_host(spec, labels={"simulator": "operations"}, endpoints=False)
        for name, priority in OPERATIONS_PRIORITIES.items():
            do_set_model_priority(ServedModel.objects.get(name=name), acting_user=None,
                                  priority=priority, comment="operations demo")  # fmt: skip
        _record_seeded(host, snapshot(host), host=host,
                       comment=f"operations demo: {host.gpus.count()} cards, "
                       f"{host.deployments.count()} deployments")  # fmt: skip
    return host


def _record_seeded(obj, after: dict, *, host=None, comment: str = "") -> None:
    record(actor=None, action=Action.DEMO_SEED, obj=obj, before=None, after=after, host=host,
           comment=comment or "demo data")  # fmt: skip


def _create_host(spec: HostSpec, *, labels: dict | None = None, endpoints: bool = True) -> Host:
    host = Host.objects.create(
        name=spec.name,
        address=f"{spec.name}.demo.internal",
        collector=Host.Collector.SIMULATED,
        labels={"fleet": "demo", **(labels or {})},
        description=_DESCRIPTIONS.get(spec.name, ""),
    )
    gpus, slices = [], {}
    for index, card in enumerate(spec.cards):
        catalogue = gpu_type(card.gpu_type)
        gpu = Gpu.objects.create(
            host=host,
            index=index,
            uuid=device_uuid(spec.name, index),
            product_name=catalogue.product_name,
            memory_total_bytes=catalogue.total_mib * MIB,
            mig_mode=_mig_mode(catalogue, card.mig_layout),
            compute_mode=Gpu.ComputeMode.EXCLUSIVE_PROCESS if card.mps else Gpu.ComputeMode.DEFAULT,
        )
        gpus.append(gpu)
        for mig_slice in card.mig_layout or ():
            geometry = MIG_CATALOGUE[_MIG_TYPES[card.gpu_type]]
            slices[(index, mig_slice)] = MigSlice.objects.create(
                gpu=gpu,
                profile_name=mig_slice.profile,
                start_slot=mig_slice.start_slot,
                size_slots=geometry.profile(mig_slice.gpu_instance_profile).memory_slices,
                memory_bytes=catalogue.mig_profiles[mig_slice.gpu_instance_profile].memory_mib
                * MIB,
                uuid=mig_uuid(spec.name, index, mig_slice),
                gpu_instance_id=mig_slice.gpu_instance_id,
                compute_instance_id=mig_slice.compute_instance_id,
            )
    sharing = _cards_shared(spec)
    for deployment_spec in spec.deployments:
        create_deployment(host, gpus, slices, deployment_spec, sharing, endpoints=endpoints)
    return host


def _mig_mode(catalogue, layout) -> str:
    if not catalogue.mig_capable:
        return Gpu.MigMode.UNSUPPORTED
    return Gpu.MigMode.ENABLED if layout else Gpu.MigMode.DISABLED


def _cards_shared(spec: HostSpec) -> set[int]:
    seen, shared = set(), set()
    for deployment in spec.deployments:
        if deployment.mig_slice is not None:
            continue
        for card in deployment.cards:
            (shared if card in seen else seen).add(card)
    return shared


def _served_model(spec: DeploymentSpec) -> ServedModel:
    workload = spec.workload
    shape = workload.shape
    model, _ = ServedModel.objects.get_or_create(
        name=workload.model,
        defaults={
            "engine": _ENGINES.get(workload.engine, ServedModel.Engine.OTHER),
            "weights_bytes": workload.weights_bytes,
            "num_layers": shape.layers,
            "num_kv_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "kv_dtype": _DTYPES[shape.kv_dtype_bytes],
            "max_context_tokens": max(8192, 2 * workload.tokens_per_request),
            "p99_latency_slo_ms": round(workload.base_latency_s * 1000 * 4),
        },
    )
    return model


def _kv_basis(spec: DeploymentSpec) -> str:
    """How the simulator sized this reservation: at the mean, or at P95 plus the buffer."""
    workload, share = spec.workload, spec.traffic_share
    reservation = spec.kv_reservation_bytes
    if not reservation:
        return Deployment.KvBasis.NONE
    for buffer in (0.0, POLICY_BUFFER_MIN, POLICY_BUFFER_MAX):
        if abs(reservation - workload.kv_reservation_bytes("p95", buffer) * share) <= 1:
            return Deployment.KvBasis.P95 if buffer else Deployment.KvBasis.MANUAL
    if abs(reservation - workload.kv_reservation_bytes("mean") * share) <= 1:
        return Deployment.KvBasis.MEAN
    return Deployment.KvBasis.MANUAL


def simulated_endpoint(host: str, deployment: str) -> str:
    """Where the simulator agent serves this deployment's API (telemetry/simulator/endpoints)."""
    port = settings.SIMULATOR_ENDPOINTS_PORT
    return f"http://127.0.0.1:{port}/{host}/{deployment}" if port else ""


def create_deployment(
    host, gpus, slices, spec: DeploymentSpec, shared_cards: set[int], *, endpoints: bool = True
):
    if spec.mig_slice is not None:
        isolation = Deployment.Isolation.MIG
    elif spec.mps_thread_percentage is not None:
        isolation = Deployment.Isolation.MPS
    elif shared_cards & set(spec.cards):
        isolation = Deployment.Isolation.TIME_SLICING
    else:
        isolation = Deployment.Isolation.GPU_GROUP
    deployment = Deployment.objects.create(
        served_model=_served_model(spec),
        host=host,
        runtime_name=spec.deployment_id,
        mig_slice=slices[(spec.cards[0], spec.mig_slice)] if spec.mig_slice else None,
        isolation_mode=isolation,
        mps_active_thread_percentage=spec.mps_thread_percentage,
        kv_reservation_bytes=spec.kv_reservation_bytes,
        kv_tokens_per_request=spec.workload.tokens_per_request,
        kv_reservation_basis=_kv_basis(spec),
        admission_policy=(
            Deployment.Admission.QUEUE if spec.admission == "queue" else Deployment.Admission.NONE
        ),
        endpoint_url=simulated_endpoint(host.name, spec.deployment_id) if endpoints else "",
        endpoint_api=Deployment.EndpointApi.COMPLETIONS,
    )
    if spec.mig_slice is None:
        deployment.gpus.set(gpus[index] for index in spec.cards)
    return deployment
