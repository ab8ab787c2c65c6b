"""Reads what the gates need from the inventory and telemetry, and runs them.

The thin Django side of the gates: every figure is read here and handed to the pure gate
modules as plain dataclasses.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from console.placement import PlacementInputError, solve
from console.proposals import loadtest_inputs
from console.proposals.gates import Gate, GateOutcome, GateStatus
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
from console.proposals.gates.memory import (
    CardBudget,
    MemoryRequest,
    Share,
    Tenant,
    evaluate_memory,
)
from console.proposals.loadtest_results import card_peaks
from console.proposals.loadtests import LoadTestRun
from console.proposals.models import LoadTest, Proposal
from inventory.analytics.stats import percentile
from inventory.models import Deployment, Gpu, MigSlice
from inventory.placement_state import WORKSPACE_ALLOWANCE, estimated_bytes_per_card
from inventory.reports import analysis
from inventory.reports.capacity import card_capacity
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


@dataclass(frozen=True)
class Checked:
    outcomes: list[GateOutcome]
    solver_gpus: list[Gpu]  # the cards the solver chose; empty when it did not choose


def share_of(proposal: Proposal, cards: int) -> Share:
    return Share.per_card(
        proposal.served_model.weights_bytes,
        proposal.kv_reservation_bytes,
        WORKSPACE_ALLOWANCE,
        cards,
    )


def _leaving(proposal: Proposal) -> int | None:
    """The deployment the change replaces: it no longer counts as a co-tenant."""
    return proposal.deployment_id if proposal.action != Proposal.Action.ADD else None


def _tenants_by_card(host, leaving: int | None) -> dict[int, list[Deployment]]:
    on_card: dict[int, list[Deployment]] = {}
    active = (
        host.deployments.exclude(status=Deployment.Status.STOPPED)
        .exclude(pk=leaving)
        .filter(mig_slice__isnull=True)
        .select_related("served_model")
        .prefetch_related("gpus")
    )
    for deployment in active:
        for gpu in deployment.gpus.all():
            on_card.setdefault(gpu.pk, []).append(deployment)
    return on_card


def card_budgets(host, leaving: int | None) -> dict[Gpu, CardBudget]:
    """Every card of the host that takes non-MIG work, with what is on it after the change."""
    on_card = _tenants_by_card(host, leaving)
    budgets = {}
    for gpu in host.gpus.exclude(mig_mode=Gpu.MigMode.ENABLED).order_by("index"):
        capacity = card_capacity(gpu)
        tenants = []
        for deployment in on_card.get(gpu.pk, []):
            measured = capacity.demand_p95.get(deployment.pk)
            tenants.append(
                Tenant(deployment.served_model.name, measured, "P95 measured, 7 days")
                if measured is not None
                else Tenant(
                    deployment.served_model.name,
                    estimated_bytes_per_card(deployment, len(deployment.gpus.all())),
                    "estimate: weights + KV reservation + workspace",
                )
            )
        budgets[gpu] = CardBudget(
            card=str(gpu),
            total_bytes=gpu.memory_total_bytes,
            driver_reserved_bytes=capacity.driver_reserved_bytes,
            tenants=tuple(tenants),
            fragmentation_peak_bytes=capacity.allocator_held_peak_bytes,
            fragmentation_index_peak=capacity.fragmentation_index_peak,
            fragmentation_status=capacity.fragmentation_status,
            measured=capacity.samples > 0,
        )
    return budgets


def slice_budget(mig_slice: MigSlice, leaving: int | None) -> CardBudget:
    others = (
        Deployment.objects.filter(mig_slice=mig_slice)
        .exclude(status=Deployment.Status.STOPPED)
        .exclude(pk=leaving)
        .select_related("served_model")
    )
    return CardBudget(
        card=f"{mig_slice.gpu} {mig_slice.profile_name}@{mig_slice.start_slot}",
        total_bytes=mig_slice.memory_bytes,
        driver_reserved_bytes=0,
        tenants=tuple(
            Tenant(d.served_model.name, estimated_bytes_per_card(d, 1), "estimate") for d in others
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


def _solver_choice(proposal, budgets, share) -> tuple[list[Gpu], str, str]:
    """(cards chosen, how, why not placed)."""
    try:
        answer = solve(_solver_request(proposal, budgets, share))
    except PlacementInputError as error:
        return [], "", f"The solver refused the request: {error}."
    if answer["unplaced"]:
        return [], "", f"The solver found no place: {answer['unplaced'][0]['reason']}."
    by_id = {str(gpu): gpu for gpu in budgets}
    chosen = [by_id[card] for card in answer["assignments"][0]["gpus"]]
    how = f"{answer['method']} ({answer['formulation']}), {answer['solve_ms']} ms"
    return chosen, how, ""


def _recent_ooms(gpus: list[Gpu], now: dt.datetime) -> dict[str, int]:
    labels = {gpu.pk: str(gpu) for gpu in gpus}
    counts = oom_counts("gpu", list(labels), now - HISTORY, now)
    return {labels[gpu_id]: n for gpu_id, n in counts.items()}


def check_memory(proposal: Proposal, now: dt.datetime) -> tuple[GateOutcome, list[Gpu]]:
    leaving = _leaving(proposal)
    headroom = settings.GATE_HEADROOM_BYTES
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        budget = slice_budget(proposal.mig_slice, leaving)
        request = MemoryRequest(
            proposal.served_model.name, share_of(proposal, 1), headroom, (budget,), (budget,)
        )
        return evaluate_memory(request), []
    if proposal.let_solver_choose:
        share = share_of(proposal, proposal.card_count)
        budgets = card_budgets(proposal.host, leaving)
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
    share = share_of(proposal, len(targets))
    budgets = card_budgets(proposal.host, leaving)
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
                source=f"engine history of {proposal.deployment}: {len(peaks)} one-minute "
                "peaks of running requests over the last 7 days",
                mean=sum(m.running_sum for m in minutes) / counted,
                peak=max(peaks),
                samples=len(peaks),
            )
    if proposal.expected_p95_concurrency is not None:
        return Concurrency(proposal.expected_p95_concurrency, "stated in the proposal")
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
    leaving = _leaving(proposal)
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        return list(
            Deployment.objects.filter(mig_slice=proposal.mig_slice)
            .exclude(status=Deployment.Status.STOPPED)
            .exclude(pk=leaving)
            .select_related("served_model")
            .prefetch_related("gpus")
        )
    on_card = _tenants_by_card(proposal.host, leaving)
    seen: dict[int, Deployment] = {}
    for gpu in targets:
        for deployment in on_card.get(gpu.pk, []):
            seen[deployment.pk] = deployment
    return list(seen.values())


def check_isolation(proposal: Proposal, targets: list[Gpu], now: dt.datetime) -> GateOutcome:
    tenants = [] if proposal.isolation_mode == "mig" else _target_tenants(proposal, targets)
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
        budget = slice_budget(proposal.mig_slice, _leaving(proposal))
        bounds = {budget.card: budget.usable_bytes - headroom}
        target_cards = (budget.card,)
        measured_gpus = [proposal.mig_slice.gpu]
    else:
        budgets = card_budgets(proposal.host, _leaving(proposal))
        bounds = {str(gpu): budgets[gpu].usable_bytes - headroom for gpu in targets}
        target_cards = tuple(target_labels.values())
        measured_gpus = targets
    tenants = _target_tenants(proposal, targets)
    ids = [d.pk for d in tenants] + ([proposal.deployment_id] if proposal.deployment_id else [])
    rates = loadtest_inputs.real_rates(ids, now)
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
    result = latest.result if measured else {}
    return evaluate_load_test(
        LoadTestRequest(
            models=tuple(models),
            card_bounds=bounds,
            run=run if run or not measured else LoadTestRun("measured", ()),
            run_label=(
                f"{'run' if measured else 'attached'} by {latest.uploaded_by.get_username()} "
                f"at {latest.uploaded_at:%Y-%m-%d %H:%M} ({', '.join(latest.files)})"
                if latest
                else ""
            ),
            telemetry=_telemetry(measured_gpus, window, bounds),
            tested_placement=result.get("placement") if measured else None,
            run_status=latest.status if measured else "",
            measured_first_bound=result.get("first_bound"),
            sent={row["model"]: row["sent"] for row in result.get("models", [])},
            errors={row["model"]: row["errors"] for row in result.get("models", [])},
        )
    )


def _not_applicable(gate: Gate) -> GateOutcome:
    return GateOutcome(
        gate,
        GateStatus.NOT_APPLICABLE,
        "A removal frees memory and SMs and adds no tenant: nothing to check.",
    )


def _failed_to_run(gate: Gate, error: Exception) -> GateOutcome:
    log.exception("gate %s could not be evaluated", gate)
    return GateOutcome(
        gate,
        GateStatus.ERROR,
        f"The gate could not be evaluated: {type(error).__name__}: {error}",
        (f"{type(error).__name__}: {error}",),
    )


def check(proposal: Proposal, now: dt.datetime | None = None) -> Checked:
    """Every gate for the proposal as it is now; a gate that breaks fails alone."""
    now = now or timezone.now()
    if proposal.action == Proposal.Action.REMOVE:
        return Checked([_not_applicable(gate) for gate in Gate], [])
    chosen: list[Gpu] = []
    try:
        memory, chosen = check_memory(proposal, now)
    except Exception as error:  # reported as the gate's result, so one bug fails one gate
        memory = _failed_to_run(Gate.MEMORY, error)
    targets = chosen if proposal.let_solver_choose else proposal.target_gpus()
    outcomes = [memory]
    for gate, run in (
        (Gate.KV, lambda: check_kv(proposal, now)),
        (Gate.ISOLATION, lambda: check_isolation(proposal, targets, now)),
        (Gate.LOAD_TEST, lambda: check_load_test(proposal, targets, now)),
    ):
        try:
            outcomes.append(run())
        except Exception as error:  # reported as the gate's result, so one bug fails one gate
            outcomes.append(_failed_to_run(gate, error))
    return Checked(outcomes, chosen)
