"""What a combined load test reads from the database: its plan and the telemetry of its window.

The plan takes every deployment that shares the cards under test, with its endpoint and its
busy-hour rate from the engine history; the telemetry is the console's own card samples over
the test's window, the same figures for a test the console ran and for an imported one.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

from console.proposals.loadtest.plan import (
    Api,
    LoadTestPlan,
    Phases,
    PlanError,
    RequestMix,
    Target,
    busy_hour_rates,
)
from console.proposals.loadtest.results import CardSample, card_peaks
from console.proposals.models import Proposal
from inventory.models import Deployment, Gpu, Host
from inventory.timeseries import queries

HISTORY = dt.timedelta(days=7)
# Where the engine history has no busy hour yet (a host minutes old), the traffic its engines
# counted in the last quarter of an hour stands in, and the plan says so.
LIVE = dt.timedelta(minutes=15)
LIVE_SOURCE = "live traffic (last 15 min): no engine history yet"


def real_rates(deployment_ids: list[int], now: dt.datetime) -> dict[int, float]:
    """Busy-hour requests per second of each deployment, from 7 days of engine minutes."""
    minutes = queries.engine_minutes(deployment_ids, now - HISTORY, now)
    return busy_hour_rates(
        {key: [(m.at, m.requests, m.requests_s) for m in rows] for key, rows in minutes.items()}
    )


def live_rates(deployment_ids: list[int], now: dt.datetime) -> dict[int, float]:
    """Requests per second each deployment's engine served in the last `LIVE`."""
    counted = queries.engine_requests_counted(deployment_ids, now - LIVE, now)
    return {key: requests / seconds for key, (requests, seconds) in counted.items() if requests}


def _cotenants(host: Host, gpus: list[Gpu], leaving: set[int]) -> list[Deployment]:
    wanted = {gpu.pk for gpu in gpus}
    active = (
        host.deployments.exclude(status=Deployment.Status.STOPPED)
        .exclude(pk__in=leaving)
        .select_related("served_model")
        .prefetch_related("gpus")
        .order_by("pk")
    )
    return [d for d in active if not wanted or wanted & {g.pk for g in d.gpus.all()}]


def _target(
    deployment: Deployment,
    rate: float | None,
    source: str,
    cards: list[str],
    real: float | None = None,
) -> Target:
    if not deployment.endpoint_url:
        raise PlanError(
            "no_endpoint", deployment=f"{deployment.served_model.name} #{deployment.pk}"
        )
    if rate is None or rate <= 0:
        raise PlanError("no_rate", deployment=f"{deployment.served_model.name} #{deployment.pk}")
    simulated = deployment.host.collector == Host.Collector.SIMULATED
    return Target(
        name=deployment.served_model.name,
        deployment=f"{deployment.served_model.name} #{deployment.pk}",
        url=deployment.endpoint_url,
        api=Api(deployment.endpoint_api),
        rate_rps=round(rate, 4),
        rate_source=source,
        slo_ms=deployment.served_model.p99_latency_slo_ms,
        cards=tuple(str(g) for g in deployment.gpus.all()) or tuple(cards),
        isolation=deployment.isolation_mode,
        engine_model=deployment.served_model.name,
        # The simulated serving stack restarts a replica on request; a real host only through
        # an allow-listed host action, which a load test does not take.
        restart_url=deployment.endpoint_url.rstrip("/") + "/restart" if simulated else "",
        deployment_id=deployment.pk,
        real_rps=real,
    )


def plan_for_deployments(
    host: Host,
    deployments: list[Deployment],
    *,
    rates: dict[int, float] | None = None,
    phases: Phases | None = None,
    mix: RequestMix | None = None,
    now: dt.datetime | None = None,
    extra: tuple[Target, ...] = (),
    rate_scale: float = 1.0,
) -> LoadTestPlan:
    """``rate_scale`` scales the busy-hour rates from telemetry, the ratio between them kept
    (a smaller test of the same mix); rates given are taken as they are."""
    now = now or timezone.now()
    measured = real_rates([d.pk for d in deployments], now)
    unmeasured = [d.pk for d in deployments if not measured.get(d.pk)]
    live = live_rates(unmeasured, now) if unmeasured else {}
    scaled = "" if rate_scale == 1 else f" x {rate_scale:g}"
    targets = []
    for deployment in deployments:
        real = measured.get(deployment.pk) or live.get(deployment.pk)
        given = (rates or {}).get(deployment.pk)
        if given:
            rate, source = given, "given"
        elif real:
            basis = "telemetry" if measured.get(deployment.pk) else LIVE_SOURCE
            rate, source = real * rate_scale, basis + scaled
        else:
            rate, source = None, "telemetry"
        targets.append(_target(deployment, rate, source, [], real))
    return LoadTestPlan(
        host=host.name,
        targets=(*targets, *extra),
        mix=mix or RequestMix(),
        phases=phases or Phases(),
        request_timeout_s=settings.LOADTEST_REQUEST_TIMEOUT_S,
    )


def plan_for_host(host: Host, **options) -> LoadTestPlan:
    """Every active deployment of the host."""
    return plan_for_deployments(host, _cotenants(host, [], set()), **options)


def plan_for_proposal(proposal, *, endpoint_url: str = "", endpoint_api: str = "", **options):
    """Everyone who will share the proposal's cards: its own deployment (a move or resize) or
    the new model at the endpoint given, and every co-tenant of its target cards that stays
    (not those it replaces)."""

    gpus = proposal.target_gpus()
    deployments = _cotenants(proposal.host, gpus, proposal.leaving_ids())
    extra: tuple[Target, ...] = ()
    if proposal.deployment_id is not None and proposal.action != Proposal.Action.ADD:
        deployments.insert(0, proposal.deployment)
    else:
        if not endpoint_url:
            raise PlanError("no_endpoint", deployment=proposal.served_model.name)
        if not proposal.expected_request_rate:
            raise PlanError("no_rate", deployment=proposal.served_model.name)
        extra = (
            Target(
                name=proposal.served_model.name,
                deployment=f"{proposal.served_model.name} (proposed)",
                url=endpoint_url,
                api=Api(endpoint_api or Api.COMPLETIONS),
                rate_rps=proposal.expected_request_rate,
                rate_source="proposal",
                slo_ms=proposal.served_model.p99_latency_slo_ms,
                cards=tuple(str(g) for g in gpus),
                isolation=proposal.isolation_mode,
                engine_model=proposal.served_model.name,
            ),
        )
    return plan_for_deployments(proposal.host, deployments, extra=extra, **options)


def card_samples(gpus: list[Gpu], start: dt.datetime, end: dt.datetime) -> list[CardSample]:
    labels = {gpu.pk: str(gpu) for gpu in gpus}
    return [
        CardSample(labels[row["gpu_id"]], row["at"], row["used_max"])
        for row in queries.card_used_samples(list(labels), start, end)
    ]


def first_over_bound(samples: list[CardSample], bounds: dict[str, int]) -> dict | None:
    for sample in samples:
        bound = bounds.get(sample.card)
        if bound is not None and sample.used_bytes > bound:
            return {
                "kind": "memory",
                "card": sample.card,
                "peak_bytes": sample.used_bytes,
                "bound_bytes": bound,
                "at": dt.datetime.fromtimestamp(sample.at, tz=dt.UTC).isoformat(timespec="seconds"),
            }
    return None


def telemetry_peaks(gpus: list[Gpu], start: dt.datetime, end: dt.datetime) -> dict[str, int]:
    return card_peaks(card_samples(gpus, start, end))


def flushed_past(gpus: list[Gpu], moment: dt.datetime) -> bool:
    """Has every card's telemetry reached ``moment`` (the flush covering it was written)?"""
    newest = queries.newest_card_sample_at([gpu.pk for gpu in gpus])
    return all(newest.get(gpu.pk) and newest[gpu.pk] >= moment for gpu in gpus)
