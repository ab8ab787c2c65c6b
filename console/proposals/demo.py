"""The demo's proposals: the 8-card host's switch to card groups, and two waiting for approval.

inventory.demo and inventory.demo_history seed the fleet and write its history and ask (their
signals) for the proposals, which sit above the inventory. The switch is the field report's
fix done as the console would have it: for each card group, on-call files an addition that
replaces the time-shared replicas on its cards, attaches the maintenance window's combined
rehearsal as its load test and submits; the gates check it as of then; the approver approves;
on-call applies it (the replicas stop) and verifies it. Every row is dated when it happened
(`open_change(at=...)`), the gates read the history as it stood then. Of the two waiting for
the approver, the one that fails gate 1 by card needs only the fleet and is filed with it; the
resize rests on the 8-card host's history and is filed as soon as that is in (its host's
backfill goes first).
"""

from __future__ import annotations

import datetime as dt
import json
import math

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from console.core.auditing.changes import open_change
from console.proposals import services
from console.proposals.gates.loadtest_report import combine
from console.proposals.guided import kv_recommendation
from console.proposals.models import Decision, GateResult, LoadTest, Notification, Proposal
from console.proposals.tasks import run_gates
from console.proposals.transitions import State
from inventory.demo import SWITCHED_HOST, ensure_demo_users, fleet_seeded, simulated_endpoint
from inventory.demo_history import host_history_written, switch_due
from inventory.models import Deployment, Host, ServedModel
from inventory.reports.analysis import KV_WINDOW
from inventory.services import do_register_runtime
from inventory.timeseries import queries

# Minutes after the rehearsal ends: each group's proposal is filed, checked, approved and
# applied before the next is filed (its cards are free only once the one before stopped the
# replicas on them); the last is applied before the switch.
STEP = dt.timedelta(minutes=1)
VERIFIED_AFTER = dt.timedelta(minutes=30)
# --gpu-memory-utilization, --mem-fraction-static, --cuda-memory-fraction of each group's engine.
GROUP_MEMORY_FRACTION = 0.9
# The open proposals' load test: the last hour of history of the deployment they resize.
OPEN_TEST_WINDOW = dt.timedelta(hours=1)
# The model that does not fit one A100 of the 3 x A100 host (gate 1 fails by card).
TOO_BIG = "chat-large"
OPEN_HOST = "a100-node"


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def _users():
    ensure_demo_users(settings.DEMO_PASSWORD)  # the seed made them; a bare backfill may not
    users = get_user_model().objects
    return users.get(username="oncall"), users.get(username="approver")


def _vllm_result(model: str, figures: dict) -> bytes:
    """What `vllm bench serve --save-result` writes, for the window the figures are of."""
    end = _at(figures["end"])
    return json.dumps(
        {
            "model_id": model,
            "completed": figures["completed"],
            "failed": 0,
            "duration": figures["end"] - figures["start"],
            "date": f"{end:%Y%m%d-%H%M%S}",
            "request_throughput": figures["rate"],
            "p99_e2el_ms": figures["p99_ms"],
        }
    ).encode()


def _attach(proposal: Proposal, author, files: list[tuple[str, bytes]], at: dt.datetime):
    with open_change(author, at=at):
        load_test = services.do_attach_load_test(
            proposal, acting_user=author, run=combine(files), files=[name for name, _ in files]
        )
    LoadTest.objects.filter(pk=load_test.pk).update(uploaded_at=at)


def _check(proposal: Proposal, at: dt.datetime) -> Proposal:
    with open_change(at=at):
        services.do_submit(proposal, acting_user=proposal.author)
    # As the worker would (the message it gets is dated the same and finds nothing to do).
    run_gates(proposal.pk, Proposal.objects.get(pk=proposal.pk).revision, at.isoformat())
    checked = Proposal.objects.get(pk=proposal.pk)
    GateResult.objects.filter(proposal=checked).update(checked_at=at)
    Notification.objects.filter(proposal=checked).update(created_at=at)
    return checked


def switch_through_proposals(sender, *, host, replicas, spec, rehearsal, at, **kwargs) -> None:
    oncall, approver = _users()
    switch = _at(at)
    started = switch - len(spec.deployments) * 4 * STEP
    gpus = list(host.gpus.order_by("index"))
    applied = []
    for step, group in enumerate(spec.deployments):
        filed = started + step * 4 * STEP
        workload = group.workload
        cards = [gpus[index] for index in group.cards]
        on_cards = {gpu.pk for gpu in cards}
        replaced = [
            d
            for d in host.deployments.exclude(status=Deployment.Status.STOPPED)
            if on_cards & {gpu.pk for gpu in d.gpus.all()}
        ]
        with open_change(oncall, at=filed):
            proposal = services.do_create_proposal(
                acting_user=oncall,
                action=Proposal.Action.ADD,
                served_model=ServedModel.objects.get(name=workload.model),
                host=host,
                gpus=cards,
                replaces=replaced,
                isolation_mode=Deployment.Isolation.GPU_GROUP,
                kv_reservation_bytes=group.kv_reservation_bytes,
                kv_reservation_basis=Deployment.KvBasis.P95,
                kv_tokens_per_request=workload.tokens_per_request,
                expected_p95_concurrency=workload.traffic.p95_concurrency,
                admission_policy=Deployment.Admission.QUEUE,
                # The engine's own share of each card (gate 5): its cards are its alone.
                engine_memory_fraction=GROUP_MEMORY_FRACTION,
                rationale=f"Field report fix: {workload.model} on its own cards "
                f"{', '.join(str(c) for c in group.cards)}, KV at P95 + 20%, the excess "
                f"queued; replaces {', '.join(d.runtime_name for d in replaced)}.",
            )
        files = [
            (f"rehearsal-{figures['model']}.json", _vllm_result(figures["model"], figures))
            for figures in rehearsal.values()
        ]
        _attach(proposal, oncall, files, filed)
        proposal = _check(proposal, filed)
        if proposal.state != State.READY:
            failed = proposal.gate_results.filter(revision=proposal.revision)
            raise RuntimeError(
                f"the demo's switch proposal {proposal} did not pass its gates: "
                + "; ".join(f"{r.gate}: {r.summary}" for r in failed if not r.passed)
            )
        with open_change(approver, at=filed + STEP):
            services.do_approve_proposal(
                proposal, acting_user=approver, comment="Rehearsal green on every card group."
            )
        Decision.objects.filter(proposal=proposal).update(decided_at=filed + STEP)
        with open_change(oncall, at=filed + 2 * STEP):
            proposal = services.do_apply(proposal, acting_user=oncall)
            # What the serving stack calls the new engine, so the host agent maps its
            # processes and its endpoint answers load tests: entered once it runs.
            do_register_runtime(
                proposal.deployment,
                acting_user=oncall,
                runtime_name=group.deployment_id,
                endpoint_url=simulated_endpoint(host.name, group.deployment_id),
            )
        applied.append(proposal)
    for proposal in applied:
        with open_change(oncall, at=switch + VERIFIED_AFTER):
            services.do_verify(
                proposal, acting_user=oncall, comment="Serving on its group: no OOM, P99 in SLO."
            )
        Proposal.objects.filter(pk=proposal.pk).update(
            created_at=started, updated_at=switch + VERIFIED_AFTER
        )


def open_resize(sender, *, host, now, **kwargs) -> None:
    """Waiting for the approver: a KV resize on the switched host, sized by the advisor from
    its history (passes its gates). Once, when that history is in."""
    if host != SWITCHED_HOST:
        return
    oncall, _ = _users()
    resized = (
        Deployment.objects.filter(
            host__name=host, status=Deployment.Status.ACTIVE, served_model__name="embed-small"
        )
        .select_related("served_model", "host")
        .first()
    )
    if resized is not None:
        _open_resize(resized, oncall, _at(now))


def open_too_big(sender, *, hosts, **kwargs) -> None:
    """Waiting for the approver: the large model on one A100 (gate 1 fails by card). Once, when
    the seed creates the A100 host: it needs no history, so it is there from the start."""
    if OPEN_HOST not in hosts:
        return
    oncall, _ = _users()
    _open_too_big(Host.objects.get(name=OPEN_HOST), oncall, timezone.now())


def _open_resize(deployment: Deployment, author, now: dt.datetime) -> None:
    draft = Proposal(
        action=Proposal.Action.RESIZE,
        served_model=deployment.served_model,
        host=deployment.host,
        deployment=deployment,
        kv_tokens_per_request=deployment.kv_tokens_per_request,
        kv_reservation_basis=Deployment.KvBasis.P95,
    )
    advice = kv_recommendation(draft, now)
    if advice is None:
        return
    with open_change(author, at=now):
        proposal = services.do_create_proposal(
            acting_user=author,
            action=Proposal.Action.RESIZE,
            served_model=deployment.served_model,
            host=deployment.host,
            deployment=deployment,
            gpus=list(deployment.gpus.all()),
            isolation_mode=deployment.isolation_mode,
            kv_reservation_bytes=advice.recommended_bytes,
            kv_reservation_basis=Deployment.KvBasis.P95,
            kv_tokens_per_request=deployment.kv_tokens_per_request,
            admission_policy=deployment.admission_policy,
            engine_memory_fraction=deployment.engine_memory_fraction,
            rationale=f"Resize the KV reservation to the advisor's figure from "
            f"{KV_WINDOW.days} days of history: {advice.formula}.",
        )
    start = now - OPEN_TEST_WINDOW
    minutes = queries.engine_minutes([deployment.pk], start, now).get(deployment.pk, [])
    p99s = [m.latency_p99_max for m in minutes if m.latency_p99_max is not None]
    requests = sum(m.requests for m in minutes)
    figures = {
        "start": start.timestamp(),
        "end": now.timestamp(),
        "completed": int(requests),
        "rate": requests / OPEN_TEST_WINDOW.total_seconds(),
        # The worst minute's P99: the test's own P99 is no better than its worst minute's.
        "p99_ms": round(max(p99s) * 1000, 1) if p99s else None,
    }
    name = deployment.served_model.name
    _attach(proposal, author, [(f"last-hour-{name}.json", _vllm_result(name, figures))], now)
    _check(proposal, now)


def _open_too_big(host: Host, author, now: dt.datetime) -> None:
    model = ServedModel.objects.get(name=TOO_BIG)
    shape = model.effective_kv_bytes_per_token
    card = host.gpus.order_by("-index").first()  # the card the A100 host keeps free
    with open_change(author, at=now):
        proposal = services.do_create_proposal(
            acting_user=author,
            action=Proposal.Action.ADD,
            served_model=model,
            host=host,
            gpus=[card],
            isolation_mode=Deployment.Isolation.GPU_GROUP,
            kv_reservation_bytes=math.ceil(16 * 4096 * shape * 1.2),
            kv_reservation_basis=Deployment.KvBasis.P95,
            kv_tokens_per_request=4096,
            expected_p95_concurrency=16,
            admission_policy=Deployment.Admission.QUEUE,
            rationale=f"A second {model.name} on the A100 host's free card, for the batch traffic.",
        )
    _check(proposal, now)


switch_due.connect(switch_through_proposals, dispatch_uid="demo-switch-through-proposals")
host_history_written.connect(open_resize, dispatch_uid="demo-open-resize")
fleet_seeded.connect(open_too_big, dispatch_uid="demo-open-too-big")
