"""Builders for proposal tests: the 3 x A100 seed host, proposals in any state."""

import json
import math
from contextlib import contextmanager
from pathlib import Path

from celery import current_app

from console.celery import app
from console.placement import solve
from console.proposals import services
from console.proposals.gates import Checked, Gate, GateOutcome, GateStatus
from console.proposals.transitions import State
from inventory.analytics.reasons import render
from inventory.models import Deployment, Gpu, Host, ServedModel
from inventory.placement_state import WORKSPACE_ALLOWANCE
from tests.factories import GIB, MIB, DeploymentFactory, GpuFactory, HostFactory, ServedModelFactory

SEED = Path(__file__).resolve().parents[3] / "inventory" / "scenarios" / "seed-3xa100-5models.json"
LOADTESTS = Path(__file__).resolve().parents[2] / "fixtures" / "loadtests"
SEED_KV = 4 * GIB


@contextmanager
def console_app_current():
    """Shared tasks resolve through Celery's current app; another test may have made its own
    app current, so make the console's current for the duration."""
    previous = current_app._get_current_object()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()


@contextmanager
def tasks_in_process():
    """Celery tasks run where they are queued, retries included (their waits skipped).

    A task queued by name runs eagerly only once its module is imported, which in a worker
    happens at start: the same here, so that no test depends on another having imported it."""
    with console_app_current():
        app.loader.import_default_modules()
        app.conf.task_always_eager = True
        try:
            yield app
        finally:
            app.conf.task_always_eager = False


def seed_host() -> Host:
    """a100-node: three A100 80 GB, the seed's five models placed as the solver packs them.

    Each model's weights are its seed size less a 4 GiB KV reservation and the workspace
    allowance, so its estimated footprint per card is exactly the seed's figure.
    """
    seed = json.loads(SEED.read_text())
    host = Host.objects.create(name="a100-node", collector=Host.Collector.SIMULATED)
    gpus = {}
    for index, card in enumerate(seed["gpus"]):
        gpus[card["id"]] = Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-a1005eed-0000-4000-8000-{index:012d}",
            product_name="NVIDIA A100-SXM4-80GB",
            memory_total_bytes=card["memory_mib"] * MIB,
        )
    answer = solve(seed)
    sizes = {model["name"]: model["memory_mib"] * MIB for model in seed["models"]}
    started: set[str] = set()
    for assignment in answer["assignments"]:
        model = ServedModelFactory(
            name=assignment["model"],
            weights_bytes=sizes[assignment["model"]] - SEED_KV - WORKSPACE_ALLOWANCE,
        )
        deployment = Deployment.objects.create(
            served_model=model,
            host=host,
            isolation_mode=Deployment.Isolation.TIME_SLICING,
            kv_reservation_bytes=SEED_KV,
            kv_reservation_basis=Deployment.KvBasis.P95,
            kv_tokens_per_request=2048,
            admission_policy=Deployment.Admission.QUEUE,
            # vLLM told to take its own size of the card, and started after the card's
            # first engine: the engine-settings gate's sound configuration.
            engine_memory_fraction=math.ceil(100 * sizes[assignment["model"]] / (80 * GIB)) / 100,
            staggered_start=bool(started & set(assignment["gpus"])),
        )
        started.update(assignment["gpus"])
        deployment.gpus.set([gpus[card] for card in assignment["gpus"]])
    return host


def shared_host():
    """Four 80 GB cards, each holding a time-shared replica of a 40 GiB model (about 51 GiB
    a card with its KV, context and workspace): no room left for a 35 GiB-a-card group."""
    host = HostFactory(name="h100-shared")
    gpus = [GpuFactory(host=host, index=index) for index in range(4)]
    chat = ServedModelFactory(name="chat", weights_bytes=40 * GIB)
    replicas = [
        DeploymentFactory(
            host=host,
            served_model=chat,
            gpus=[gpu],
            isolation_mode=Deployment.Isolation.TIME_SLICING,
        )
        for gpu in gpus
    ]
    return host, gpus, replicas


def proposal_fields(**overrides) -> dict:
    """A sound addition: P95-sized KV with a queue above it, on a card of its own."""
    fields = {
        "action": "add",
        "isolation_mode": Deployment.Isolation.GPU_GROUP,
        # Llama-3-8B shape: 128 KiB a token; 10 requests x 4096 tokens x 1.2 = 6 GiB.
        "kv_reservation_bytes": 6 * GIB,
        "kv_reservation_basis": Deployment.KvBasis.P95,
        "kv_tokens_per_request": 4096,
        "expected_p95_concurrency": 10,
        "admission_policy": Deployment.Admission.QUEUE,
        "rationale": "Serve the new summariser beside the chat models.",
    }
    return fields | overrides


def create_proposal(author, *, host=None, gpus=None, model=None, **overrides):
    if host is None:
        gpu = GpuFactory()
        host, gpus = gpu.host, [gpu] if gpus is None else gpus
    return services.do_create_proposal(
        acting_user=author,
        served_model=model or ServedModelFactory(weights_bytes=16 * GIB),
        host=host,
        gpus=gpus or [],
        **proposal_fields(**overrides),
    )


def outcomes(failing: tuple[Gate, ...] = ()) -> Checked:
    return Checked(
        [
            GateOutcome(
                gate,
                GateStatus.FAIL if gate in failing else GateStatus.PASS,
                f"{gate.title}: {'fails' if gate in failing else 'fine'} (test figures).",
                numbers={"test": True},
            )
            for gate in Gate
        ],
        [],
    )


def checked(proposal, failing: tuple[Gate, ...] = ()):
    """Submitted -> checking -> ready (or changes requested), as the worker would do it."""
    if proposal.state == State.DRAFT:
        services.do_submit(proposal, acting_user=proposal.author)
    services.do_start_checks(proposal.pk, proposal.revision)
    return services.do_record_gate_results(proposal.pk, proposal.revision, outcomes(failing))


def ready_proposal(author, **kwargs):
    return checked(create_proposal(author, **kwargs))


def approved_proposal(author, approver, **kwargs):
    return services.do_approve_proposal(ready_proposal(author, **kwargs), acting_user=approver)


def applied_proposal(author, approver, **kwargs):
    return services.do_apply(approved_proposal(author, approver, **kwargs), acting_user=author)


def applied_change(personas, deployment, action: str, **overrides):
    """On-call's proposal to move, resize or remove `deployment`, approved and applied."""
    overrides.setdefault("gpus", list(deployment.gpus.all()))
    return applied_proposal(
        personas["oncall"],
        personas["approver"],
        host=deployment.host,
        model=deployment.served_model,
        action=action,
        deployment=deployment,
        **overrides,
    )


def served_model(name: str, **fields) -> ServedModel:
    return ServedModelFactory(name=name, **fields)


def matrix_objects(personas, host) -> dict:
    """Proposals by on-call for `host`, in each state the permission matrix needs."""
    author, approver = personas["oncall"], personas["approver"]
    on_host = {"host": host, "gpus": list(host.gpus.all()[:1])}
    draft = create_proposal(author, **on_host)
    return {
        "draft": draft,
        "ready": ready_proposal(author, **on_host),
        "approved": approved_proposal(author, approver, **on_host),
        "applied": applied_proposal(author, approver, **on_host),
        "console_test": running_load_test(draft, author),
    }


def running_load_test(proposal, user):
    """A combined test the console runs, as the task leaves it half-way."""
    from console.proposals.models import LoadTest

    return LoadTest.objects.create(
        proposal=proposal,
        uploaded_by=user,
        source_format=LoadTest.Format.MEASURED,
        files=["combined test"],
        status=LoadTest.Status.RUNNING,
        progress={"phase": "hold", "elapsed_s": 12.0, "models": [], "cards": []},
    )


def form_data(proposal_or_host, model=None) -> dict:
    """What the proposal form posts: for an existing proposal, its own fields."""
    if isinstance(proposal_or_host, Host):
        host, gpus = proposal_or_host, list(proposal_or_host.gpus.all()[:1])
    else:
        host, gpus = proposal_or_host.host, list(proposal_or_host.gpus.all())
        model = proposal_or_host.served_model
    fields = proposal_fields()
    return {
        "action": fields["action"],
        "served_model": model.pk,
        "host": host.pk,
        "gpus": [gpu.pk for gpu in gpus],
        "card_count": 1,
        "isolation_mode": fields["isolation_mode"],
        "kv_reservation_gib": "6",
        "kv_reservation_basis": fields["kv_reservation_basis"],
        "kv_tokens_per_request": fields["kv_tokens_per_request"],
        "expected_p95_concurrency": fields["expected_p95_concurrency"],
        "admission_policy": fields["admission_policy"],
        "canary_share_pct": 20,
        "rollout_steps": 3,
        "rationale": fields["rationale"],
    }


def api_body(host, model) -> dict:
    return {
        "served_model": model.name,
        "host": host.name,
        "cards": [host.gpus.first().index],
        "isolation_mode": Deployment.Isolation.GPU_GROUP,
        "kv_reservation_bytes": 6 * GIB,
        "kv_tokens_per_request": 4096,
        "expected_p95_concurrency": 10,
        "admission_policy": Deployment.Admission.QUEUE,
        "rationale": "From the deploy pipeline.",
    }


def load_test_upload() -> dict:
    from django.core.files.uploadedfile import SimpleUploadedFile

    csv = LOADTESTS / "combined-a100-node-1.csv"
    return {"files": [SimpleUploadedFile(csv.name, csv.read_bytes(), content_type="text/csv")]}


IMPORT_RATES = {"qwen2-14b-q4": 4.0, "qwen2-7b-q4": 6.0, "bge-large-fp16": 12.0}


def recent_combined_import(card, peak_gib: float = 74.5, *, bodies: bool = False):
    """The four vLLM results of the fixture as if run in the last ten minutes, beside the
    console's telemetry of that window: `card` peaking at `peak_gib`, and the engine history
    of its co-tenants at the fixture's production ratio (4 : 6 : 12 requests/s). The files come
    back by name, or with `bodies` as (name, content) to upload them."""
    import datetime as dt

    from console.proposals.gates.loadtest_report import combine
    from inventory.ingest.writer import ingest_batches
    from inventory.timeseries import rollups
    from tests.batches import batch, card_row, engine_row

    end = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=30)
    files = []
    for path in sorted(LOADTESTS.glob("openai-*.json")):
        data = json.loads(path.read_text())
        data["date"] = end.strftime("%Y%m%d-%H%M%S")
        files.append((path.name, json.dumps(data).encode()))
    run = combine(files, f"{card},{peak_gib}")
    start = end - dt.timedelta(seconds=max(m.duration_s for m in run.models))
    tenants = card.deployments.select_related("served_model")
    batches = []
    minute = start.timestamp()
    while minute < end.timestamp():
        engines = []
        for deployment in tenants:
            row = engine_row(deployment, running=4, p99_s=0.5)
            row["latency"]["e2e"]["count"] = IMPORT_RATES[deployment.served_model.name] * 60
            engines.append(row)
        used = round(peak_gib * GIB)
        batches.append(
            batch(
                card.host,
                start=minute,
                end=minute + 60,
                cards=[card_row(card, used_max=used, used_last=used)],
                engines=engines,
            )
        )
        minute += 60
    rejected = [r for r in ingest_batches(batches) if not hasattr(r, "batch_id")]
    assert not rejected, rejected
    rollups.refresh_all()
    return run, files if bodies else [name for name, _ in files]


def english(reason) -> str:
    """A gate's reason as the audit trail keeps it (the catalogue's English)."""
    return render(reason)


def codes_of(reasons) -> list[str]:
    return [reason.code for reason in reasons]
