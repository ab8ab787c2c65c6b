"""Reads what the gates need from the inventory and telemetry, and runs them.

The thin Django side of the gates: every figure is read here and handed to the pure gate
modules as plain dataclasses.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable, Collection

from django.conf import settings
from django.utils import timezone

from console.placement import PlacementInputError, solve
from console.proposals.budgets import card_budgets, tenants_by_card
from console.proposals.gates import Checked, Gate, GateOutcome, GateStatus
from console.proposals.gates.engine_settings import (
    CardEngines,
    EngineSettingsRequest,
    engine_claim,
    evaluate_engine_settings,
)
from console.proposals.gates.isolation import (
    InterferenceFinding,
    IsolationRequest,
    evaluate_isolation,
)
from console.proposals.gates.kv import Concurrency, KvRequest, evaluate_kv
from console.proposals.gates.loadtest import (
    Colocated,
    LoadTestRequest,
    Telemetry,
    evaluate_load_test,
)
from console.proposals.gates.loadtest_report import LoadTestRun
from console.proposals.gates.memory import (
    CardBudget,
    MemoryRequest,
    Share,
    Tenant,
    evaluate_memory,
)
from console.proposals.gates.memory import refused as refused_outcome
from console.proposals.loadtest import inputs as loadtest_inputs
from console.proposals.loadtest.plan import LoadTestPlan
from console.proposals.loadtest.results import card_peaks
from console.proposals.models import LoadTest, Proposal
from inventory.analytics.context import cuda_context_estimate
from inventory.analytics.kv import kv_reservation_per_card
from inventory.analytics.reasons import Reason
from inventory.analytics.stats import percentile
from inventory.models import Deployment, Gpu, MigSlice
from inventory.models.refusal import refused_gpu_ids
from inventory.placement_state import WORKSPACE_ALLOWANCE, estimated_bytes_per_card
from inventory.reports import analysis
from inventory.reports.oom import oom_counts
from inventory.timeseries import queries

log = logging.getLogger(__name__)

MIB = 1024**2
HISTORY = dt.timedelta(days=7)
SOLVER_TIME_LIMIT_S = 5
_SOLVER_ISOLATION = {
    Deployment.Isolation.GPU_GROUP: "group",
    Deployment.Isolation.MPS: "mps",
    Deployment.Isolation.TIME_SLICING: "any",
}


def _card_type(proposal: Proposal) -> str:
    gpu = proposal.host.gpus.order_by("index").first()
    return gpu.product_name if gpu else ""


def share_of(proposal: Proposal, cards: int) -> Share:
    """The proposal's memory on each card: KV as each tensor-parallel card holds it (one
    pipeline stage: a proposal does not state pipeline parallelism), and its process's CUDA
    context (the card type's estimate: the process does not exist yet)."""
    kv = kv_reservation_per_card(
        proposal.kv_reservation_bytes, proposal.served_model.kv_shape(), max(1, cards)
    )
    return Share.per_card(
        proposal.served_model.weights_bytes,
        kv,
        WORKSPACE_ALLOWANCE,
        cards,
        cuda_context_estimate(_card_type(proposal)),
    )


def _gpu_instance_tenants(mig_slice: MigSlice, leaving: Collection[int]):
    """Deployments on any compute instance of the slice's GPU instance: they share its memory
    (1c.3g.71gb and 2c.3g.71gb hold one 3g.71gb's memory between them)."""
    return (
        Deployment.objects.filter(mig_slice__in=mig_slice.gpu_instance_devices())
        .exclude(status=Deployment.Status.STOPPED)
        .exclude(pk__in=leaving)
        .select_related("served_model", "mig_slice")
        .prefetch_related("gpus")
    )


def slice_budget(mig_slice: MigSlice, leaving: Collection[int]) -> CardBudget:
    """The memory budget of the slice's GPU instance, counted once for all its compute
    instances, so siblings cannot book the same bytes twice."""
    context = cuda_context_estimate(mig_slice.gpu.product_name)
    others = _gpu_instance_tenants(mig_slice, leaving)
    return CardBudget(
        card=f"{mig_slice.gpu} {mig_slice.profile_name}@{mig_slice.start_slot}",
        total_bytes=mig_slice.memory_bytes,
        driver_reserved_bytes=0,
        tenants=tuple(
            Tenant(
                d.served_model.name,
                estimated_bytes_per_card(d, 1, mig_slice.gpu.product_name),
                Reason("gate.memory.basis.slice_estimate")
                if d.mig_slice_id == mig_slice.pk
                else Reason(
                    "gate.memory.basis.sibling_estimate", {"profile": d.mig_slice.profile_name}
                ),
                context.bytes,
                context.source,
            )
            for d in others
        ),
        fragmentation_peak_bytes=0,
        fragmentation_index_peak=None,
        fragmentation_status="green",
        measured=False,
    )


def _solver_request(proposal: Proposal, budgets: dict[Gpu, CardBudget], share: Share) -> dict:
    headroom = settings.GATE_HEADROOM_BYTES
    cards = []
    for gpu, budget in budgets.items():
        memory = budget.usable_bytes // MIB
        taken = math.ceil((budget.tenants_bytes + budget.fragmentation_peak_bytes) / MIB)
        # A red card takes nothing, so the solver never picks one the gate would then fail.
        used = memory if budget.fragmentation_status == "red" else min(memory, taken)
        cards.append(
            {
                "id": str(gpu),
                "host": proposal.host.name,
                "type": gpu.product_name,
                "memory_mib": memory,
                "used_mib": used,
                "models": [tenant.name for tenant in budget.tenants],
            }
        )
    return {
        "gpus": cards,
        "models": [
            {
                "name": proposal.served_model.name,
                "memory_mib": math.ceil(share.total_bytes / MIB),
                "gpus": proposal.card_count,
                "isolation": _SOLVER_ISOLATION[proposal.isolation_mode],
            }
        ],
        "policy": {
            "method": "auto",
            "time_limit_s": SOLVER_TIME_LIMIT_S,
            "headroom_mib": headroom // MIB,
        },
    }


def _solver_choice(proposal, budgets, share) -> tuple[list[Gpu], Reason | None, Reason | str]:
    """(cards chosen, how, why not placed)."""
    try:
        answer = solve(_solver_request(proposal, budgets, share))
    except PlacementInputError as error:
        return [], None, Reason("gate.memory.solver_refused", {"error": str(error)})
    if answer["unplaced"]:
        why = answer["unplaced"][0]["reason_detail"]
        return [], None, Reason("gate.memory.solver_no_place", {"reason": Reason.from_json(why)})
    by_id = {str(gpu): gpu for gpu in budgets}
    chosen = [by_id[card] for card in answer["assignments"][0]["gpus"]]
    how = Reason(
        "gate.memory.chosen_by",
        {
            "method": Reason(f"gate.memory.method.{answer['method']}"),
            "formulation": Reason(f"gate.memory.formulation.{answer['formulation']}"),
            "solve_ms": answer["solve_ms"],
        },
    )
    return chosen, how, ""


def _recent_ooms(gpus: list[Gpu], now: dt.datetime) -> dict[str, int]:
    labels = {gpu.pk: str(gpu) for gpu in gpus}
    counts = oom_counts("gpu", list(labels), now - HISTORY, now)
    return {labels[gpu_id]: n for gpu_id, n in counts.items()}


def _refused_cards(proposal: Proposal, gpus, now: dt.datetime) -> set[int]:
    """Cards refusing new loads at `now` (degradation set them): only a change that brings a
    model onto a card is refused; a resize or removal on it is what may clear it."""
    if proposal.action not in (Proposal.Action.ADD, Proposal.Action.MOVE):
        return set()
    return refused_gpu_ids((gpu.pk for gpu in gpus), at=now)


def check_memory(proposal: Proposal, now: dt.datetime) -> tuple[GateOutcome, list[Gpu]]:
    leaving = proposal.leaving_ids()
    headroom = settings.GATE_HEADROOM_BYTES
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        budget = slice_budget(proposal.mig_slice, leaving)
        request = MemoryRequest(
            proposal.served_model.name, share_of(proposal, 1), headroom, (budget,), (budget,)
        )
        return evaluate_memory(request), []
    if proposal.let_solver_choose:
        share = share_of(proposal, proposal.card_count)
        budgets = card_budgets(proposal.host, leaving, now)
        refused = _refused_cards(proposal, budgets, now)
        budgets = {gpu: budget for gpu, budget in budgets.items() if gpu.pk not in refused}
        chosen, how, unplaced = _solver_choice(proposal, budgets, share)
        request = MemoryRequest(
            proposal.served_model.name,
            share,
            headroom,
            tuple(budgets[gpu] for gpu in chosen),
            tuple(budgets.values()),
            chosen_by=how,
            unplaced_reason=unplaced,
            recent_ooms=_recent_ooms(chosen, now),
        )
        return evaluate_memory(request), chosen
    targets = proposal.target_gpus()
    refused = _refused_cards(proposal, targets, now)
    if refused:
        return refused_outcome([str(gpu) for gpu in targets if gpu.pk in refused]), []
    share = share_of(proposal, len(targets))
    budgets = card_budgets(proposal.host, leaving, now)
    request = MemoryRequest(
        proposal.served_model.name,
        share,
        headroom,
        tuple(budgets[gpu] for gpu in targets if gpu in budgets),
        tuple(budgets.values()),
        recent_ooms=_recent_ooms(targets, now),
    )
    return evaluate_memory(request), []


def _engine_history(deployment_id: int, now: dt.datetime) -> list[queries.EngineMinute]:
    # The KV advice's window and basis, so the gate sizes on the host page's P95.
    start = now - analysis.KV_WINDOW
    return queries.engine_minutes([deployment_id], start, now).get(deployment_id, [])


def concurrency_of(proposal: Proposal, now: dt.datetime) -> Concurrency | None:
    if proposal.deployment_id is not None:
        minutes = _engine_history(proposal.deployment_id, now)
        peaks = [m.running_max for m in minutes if m.running_max is not None]
        counted = sum(m.running_count for m in minutes)
        if peaks and counted:
            return Concurrency(
                p95=percentile(peaks, 95),
                source=Reason(
                    "gate.kv.source_history",
                    {"deployment": str(proposal.deployment), "peaks": len(peaks)},
                ),
                mean=sum(m.running_sum for m in minutes) / counted,
                peak=max(peaks),
                samples=len(peaks),
            )
    if proposal.expected_p95_concurrency is not None:
        return Concurrency(proposal.expected_p95_concurrency, Reason("gate.kv.source_stated"))
    return None


def check_kv(proposal: Proposal, now: dt.datetime) -> GateOutcome:
    return evaluate_kv(
        KvRequest(
            model=proposal.served_model.name,
            basis=proposal.kv_reservation_basis,
            reservation_bytes=proposal.kv_reservation_bytes,
            admission_policy=proposal.admission_policy,
            buffer=settings.KV_BUFFER,
            bytes_per_token=proposal.served_model.effective_kv_bytes_per_token,
            tokens_per_request=proposal.kv_tokens_per_request,
            concurrency=concurrency_of(proposal, now),
        )
    )


def _target_tenants(proposal: Proposal, targets: list[Gpu]) -> list[Deployment]:
    leaving = proposal.leaving_ids()
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        return list(
            Deployment.objects.filter(mig_slice=proposal.mig_slice)
            .exclude(status=Deployment.Status.STOPPED)
            .exclude(pk__in=leaving)
            .select_related("served_model")
            .prefetch_related("gpus")
        )
    on_card = tenants_by_card(proposal.host, leaving)
    seen: dict[int, Deployment] = {}
    for gpu in targets:
        for deployment in on_card.get(gpu.pk, []):
            seen[deployment.pk] = deployment
    return list(seen.values())


def check_isolation(proposal: Proposal, targets: list[Gpu], now: dt.datetime) -> GateOutcome:
    mig = proposal.isolation_mode == Deployment.Isolation.MIG
    tenants = [] if mig else _target_tenants(proposal, targets)
    in_instance = _target_tenants(proposal, targets) if mig else []
    siblings = (
        [
            d
            for d in _gpu_instance_tenants(proposal.mig_slice, proposal.leaving_ids())
            if d.mig_slice_id != proposal.mig_slice_id
        ]
        if mig
        else []
    )
    labels = {f"{d.served_model.name} #{d.pk}" for d in tenants}
    findings = tuple(
        InterferenceFinding(report.deployment, report.explanation)
        for report in analysis.interference(proposal.host, now)
        if report.flagged and report.deployment in labels
    )
    acknowledged_at = proposal.mps_acknowledged_at
    return evaluate_isolation(
        IsolationRequest(
            model=proposal.served_model.name,
            mode=proposal.isolation_mode,
            cotenants=tuple(sorted(d.served_model.name for d in tenants)),
            instance_cotenants=tuple(sorted(d.served_model.name for d in in_instance)),
            gpu_instance_siblings=tuple(sorted(d.served_model.name for d in siblings)),
            interference=findings,
            acknowledged_by=(
                proposal.mps_acknowledged_by.get_username() if proposal.mps_acknowledged_by else ""
            ),
            acknowledged_at=acknowledged_at.isoformat(timespec="minutes")
            if acknowledged_at
            else "",
        )
    )


def _import_window(run: LoadTestRun) -> tuple[dt.datetime, dt.datetime] | None:
    """The imported result's window, its naive client times read as UTC."""
    starts, ends = [], []
    for model in run.models:
        if model.started_at and model.ended_at:
            starts.append(_aware(dt.datetime.fromisoformat(model.started_at)))
            ends.append(_aware(dt.datetime.fromisoformat(model.ended_at)))
    if not starts:
        return None
    return min(starts), max(ends)


def _aware(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _telemetry(gpus: list[Gpu], window, bounds: dict[str, int]) -> Telemetry:
    if window is None:
        return Telemetry(None)
    start, end = window
    samples = loadtest_inputs.card_samples(gpus, start, end)
    return Telemetry(
        (start.isoformat(timespec="seconds"), end.isoformat(timespec="seconds")),
        card_peaks(samples),
        loadtest_inputs.first_over_bound(samples, bounds),
    )


def _per_model(rows: list[Colocated]) -> list[Colocated]:
    """Replicas of one model count as that model: rates add up, cards join."""
    merged: dict[str, Colocated] = {}
    for row in rows:
        seen = merged.get(row.name)
        if seen is None:
            merged[row.name] = row
            continue
        rate = (
            None
            if seen.real_rate is None or row.real_rate is None
            else seen.real_rate + row.real_rate
        )
        merged[row.name] = Colocated(
            row.name,
            seen.slo_ms,
            tuple(dict.fromkeys(seen.cards + row.cards)),
            rate,
            seen.isolation,
        )
    return list(merged.values())


def check_load_test(proposal: Proposal, targets: list[Gpu], now: dt.datetime) -> GateOutcome:
    target_labels = {gpu.pk: str(gpu) for gpu in targets}
    headroom = settings.GATE_HEADROOM_BYTES
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        budget = slice_budget(proposal.mig_slice, proposal.leaving_ids())
        bounds = {budget.card: budget.usable_bytes - headroom}
        target_cards = (budget.card,)
        measured_gpus = [proposal.mig_slice.gpu]
    else:
        budgets = card_budgets(proposal.host, proposal.leaving_ids(), now)
        bounds = {str(gpu): budgets[gpu].usable_bytes - headroom for gpu in targets}
        target_cards = tuple(target_labels.values())
        measured_gpus = targets
    tenants = _target_tenants(proposal, targets)
    ids = [d.pk for d in tenants] + ([proposal.deployment_id] if proposal.deployment_id else [])
    latest = (
        proposal.load_tests.filter(status__in=LoadTest.FINISHED)
        .select_related("uploaded_by")
        .first()
    )
    run = LoadTestRun.from_json(latest.run) if latest and latest.run else None
    measured = latest is not None and latest.source_format == LoadTest.Format.MEASURED
    if measured and latest.window_start and latest.window_end:
        window = (latest.window_start, latest.window_end)
    else:
        window = _import_window(run) if run and not measured else None
    # A test the console ran is held to the real traffic its plan was made from, not to the
    # engine history since, which holds the test's own requests (the engines count those too);
    # deployments its plan did not measure, to the traffic before the test began. An imported
    # result's basis is unknown: the traffic as it is now.
    rates_at = min(now, window[0]) if measured and window else now
    rates = loadtest_inputs.real_rates(ids, rates_at)
    if measured and latest.plan:
        rates |= {
            target.deployment_id: target.real_rps
            for target in LoadTestPlan.from_json(latest.plan).targets
            if target.deployment_id is not None and target.real_rps
        }
    models = [
        Colocated(
            name=d.served_model.name,
            slo_ms=d.served_model.p99_latency_slo_ms,
            cards=tuple(target_labels[gpu.pk] for gpu in d.gpus.all() if gpu.pk in target_labels)
            or target_cards,
            real_rate=rates.get(d.pk),
            isolation=d.isolation_mode,
        )
        for d in tenants
    ]
    models.insert(
        0,
        Colocated(
            name=proposal.served_model.name,
            slo_ms=proposal.served_model.p99_latency_slo_ms,
            cards=target_cards,
            real_rate=rates.get(proposal.deployment_id) or proposal.expected_request_rate,
            isolation=proposal.isolation_mode,
        ),
    )
    models = _per_model(models)
    result = latest.result if measured else {}
    return evaluate_load_test(
        LoadTestRequest(
            models=tuple(models),
            card_bounds=bounds,
            run=run if run or not measured else LoadTestRun("measured", ()),
            run_label=(
                Reason(
                    "gate.load_test.run_by" if measured else "gate.load_test.attached_by",
                    {
                        "user": latest.uploaded_by.get_username(),
                        "at": latest.uploaded_at.isoformat(timespec="seconds"),
                        "files": latest.files,
                    },
                )
                if latest
                else None
            ),
            telemetry=_telemetry(measured_gpus, window, bounds),
            tested_placement=result.get("placement") if measured else None,
            run_status=latest.status if measured else "",
            measured_first_bound=result.get("first_bound"),
            sent={row["model"]: row["sent"] for row in result.get("models", [])},
            errors={row["model"]: row["errors"] for row in result.get("models", [])},
        )
    )


def _engine_claim(record, model, cards: int, total: int, product: str, reported, proposed=False):
    """One engine's claim on a card from its settings (a Deployment or a Proposal: both carry
    EngineSettings); ``reported`` is the memory fraction the engine reported, if any."""
    kv_shape = model.kv_shape()
    context_kv = None
    if record.engine_context_tokens and kv_shape is not None:
        per_token = kv_reservation_per_card(
            record.engine_context_tokens * math.ceil(kv_shape.bytes_per_token()),
            kv_shape,
            max(1, cards),
        )
        context_kv = per_token.bytes
    return engine_claim(
        model.name,
        model.engine,
        total_bytes=total,
        memory_fraction=record.engine_memory_fraction,
        kv_cache_bytes=record.engine_kv_cache_bytes,
        weights_bytes=model.weights_bytes // max(1, cards),
        overhead_bytes=(record.engine_overhead_bytes or 0)
        + cuda_context_estimate(product).bytes
        + WORKSPACE_ALLOWANCE,
        context_kv_bytes=context_kv,
        reported_fraction=reported,
        staggered=record.staggered_start,
        version=record.engine_version,
        proposed=proposed,
    )


def check_engine_settings(proposal: Proposal, targets: list[Gpu], now: dt.datetime) -> GateOutcome:
    leaving = proposal.leaving_ids()
    model = proposal.served_model
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        piece = proposal.mig_slice
        places = [(str(piece), piece.memory_bytes, piece.gpu.product_name,
                   list(_gpu_instance_tenants(piece, leaving)))]  # fmt: skip
        cards = 1
    else:
        on_card = tenants_by_card(proposal.host, leaving)
        places = [
            (str(gpu), gpu.memory_total_bytes, gpu.product_name, on_card.get(gpu.pk, []))
            for gpu in targets
        ]
        cards = len(targets)
    tenants = {d.pk for _, _, _, ds in places for d in ds}
    reported = queries.engine_kv_at(list(tenants), now, dt.timedelta(days=1))
    request = EngineSettingsRequest(
        model.name,
        settings.GATE_HEADROOM_BYTES,
        tuple(
            CardEngines(
                label,
                total,
                (
                    _engine_claim(proposal, model, cards, total, product, None, proposed=True),
                    *(
                        _engine_claim(
                            d,
                            d.served_model,
                            1 if d.mig_slice_id else len(d.gpus.all()),
                            total,
                            product,
                            (reported.get(d.pk) or {}).get("memory_fraction"),
                        )
                        for d in deployments
                    ),
                ),
            )
            for label, total, product, deployments in places
        ),
        memory_limit=settings.DEGRADATION_LIMIT,
    )
    return evaluate_engine_settings(request)


def _not_applicable(gate: Gate) -> GateOutcome:
    return GateOutcome(gate, GateStatus.NOT_APPLICABLE, Reason("gate.not_applicable"))


def _failed_to_run(gate: Gate, error: Exception) -> GateOutcome:
    log.exception("gate %s could not be evaluated", gate)
    return GateOutcome(
        gate,
        GateStatus.ERROR,
        Reason("gate.error", {"error": f"{type(error).__name__}: {error}"}),
        # The exception's own words, which no catalogue holds.
        (f"{type(error).__name__}: {error}",),
    )


def check(
    proposal: Proposal,
    now: dt.datetime | None = None,
    on_outcome: Callable[[GateOutcome], None] | None = None,
) -> Checked:
    """Every gate for the proposal as it is now; a gate that breaks fails alone.
    `on_outcome` hears of each gate as it finishes, for the pages that show progress."""
    now = now or timezone.now()
    if proposal.action == Proposal.Action.REMOVE:
        return Checked([_not_applicable(gate) for gate in Gate], [])
    chosen: list[Gpu] = []
    try:
        memory, chosen = check_memory(proposal, now)
    except Exception as error:  # reported as the gate's result, so one bug fails one gate
        memory = _failed_to_run(Gate.MEMORY, error)
    if on_outcome:
        on_outcome(memory)
    targets = chosen if proposal.let_solver_choose else proposal.target_gpus()
    outcomes = [memory]
    for gate, run in (
        (Gate.KV, lambda: check_kv(proposal, now)),
        (Gate.ISOLATION, lambda: check_isolation(proposal, targets, now)),
        (Gate.LOAD_TEST, lambda: check_load_test(proposal, targets, now)),
        (Gate.ENGINE_SETTINGS, lambda: check_engine_settings(proposal, targets, now)),
    ):
        try:
            outcomes.append(run())
        except Exception as error:  # reported as the gate's result, so one bug fails one gate
            outcomes.append(_failed_to_run(gate, error))
        if on_outcome:
            on_outcome(outcomes[-1])
    return Checked(outcomes, chosen)
