"""History for the demo fleet: days of simulated telemetry written before the console opens.

The simulator runs faster than real time over the past few days, through the same host
runtime the live agent uses (collector, sampler, process mapping), and the batches go through
the same ingest as live ones. The 8-card host infer-01 starts the window as the field report
found it (three models time-sharing all eight cards, KV reserved at the mean, no admission
policy) and is switched half-way to its own card groups with P95 + 20% reservations: the
switch is in the audit trail, so the OOM history shows OOMs before it and none after.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import replace

from django.core.cache import cache

from console.audit import Action, snapshot
from console.audit.changes import open_change, record
from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.collection import collection_plan
from inventory.demo import create_deployment
from inventory.models import Deployment, Host, IngestedBatch
from inventory.telemetry.simulator.scenarios import before_host, demo_fleet_specs
from inventory.timeseries import rollups
from inventory.timeseries.ingest import BatchRejected, ingest_batches

log = logging.getLogger(__name__)

SWITCHED_HOST = "infer-01"
# Coarser than live collection: history is for trends, and the backfill must stay quick.
SAMPLE_S, FLUSH_S, SCRAPE_S, SIM_STEP_S = 60.0, 600.0, 300.0, 30.0
GROUP = 200
# How often, in simulated time, the backfill says how far it is.
REPORT_EVERY_S = 3 * 3600.0


class _Clock:
    def __init__(self, start: float):
        self.t = start

    def __call__(self) -> float:
        return self.t


def backfill(
    *, days: float, now: float, seed: int = 0, only: set[str] | None = None
) -> dict[str, int]:
    """Write `days` of history for every simulated demo host (or `only` these) that has none."""
    written: dict[str, int] = {}
    specs = {spec.name: spec for spec in demo_fleet_specs() if only is None or spec.name in only}
    start = now - days * 86400
    hosts = [
        host
        for host in Host.objects.filter(collector=Host.Collector.SIMULATED, name__in=specs)
        if not IngestedBatch.objects.filter(host=host, interval_end__lt=_at(start + 86400)).exists()
    ]  # a host with history already is left alone
    progress = BackfillProgress(days, [host.name for host in hosts])
    for host in hosts:
        report = progress.of(host.name, start, now)
        if host.name == SWITCHED_HOST:
            switch = now - days * 86400 / 2
            before = _before_deployments(host, _at(start))
            written[host.name] = _simulate(
                host, replace(before_host(xid_per_card_day=0.02), name=host.name), start,
                switch, seed, plan=_plan_for(host, before), progress=report,
            )  # fmt: skip
            _record_switch(host, before, switch)
            written[host.name] += _simulate(
                host, specs[host.name], switch, now, seed, progress=report
            )
        else:
            written[host.name] = _simulate(
                host, specs[host.name], start, now, seed, progress=report
            )
        progress.done(host.name)
        log.info("demo history: %s, %d batches", host.name, written[host.name])
    progress.finish()
    return written


class BackfillProgress:
    """How far the backfill is, per host, in the shared cache: the fleet board shows it."""

    CACHE_KEY = "demo-history-progress"
    KEPT_S = 24 * 3600

    def __init__(self, days: float, hosts: list[str]):
        self.state = {"days": days, "hosts": dict.fromkeys(hosts, 0.0), "finished": not hosts}
        self._save()

    def of(self, host: str, start: float, end: float):
        def report(now: float) -> None:
            self.state["hosts"][host] = round(min(1.0, (now - start) / (end - start)), 3)
            self._save()

        return report

    def done(self, host: str) -> None:
        self.state["hosts"][host] = 1.0
        self._save()

    def finish(self) -> None:
        self.state["finished"] = True
        self._save()

    def _save(self) -> None:
        cache.set(self.CACHE_KEY, self.state, self.KEPT_S)

    @classmethod
    def current(cls) -> dict | None:
        return cache.get(cls.CACHE_KEY)


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def _plan_for(host: Host, deployments: list[Deployment]) -> dict:
    plan = collection_plan(host)
    plan["deployments"] = [
        {
            "deployment_id": str(d.pk),
            "runtime_name": d.runtime_name,
            "engine": d.served_model.engine,
            "device_uuids": [gpu.uuid for gpu in d.gpus.all()],
        }
        for d in deployments
    ]
    return plan


def _simulate(
    host, spec, start: float, end: float, seed: int, plan: dict | None = None, progress=None
) -> int:
    clock = _Clock(start)
    simulator = FleetSimulator(seed, clock, specs=[spec], max_step_s=SIM_STEP_S)
    batches: list[dict] = []
    runtime = HostRuntime(host.name, simulator.source_for(_sim_plan(host)), batches.append)
    runtime.apply_plan(
        {**(plan or collection_plan(host)), "sample_interval_s": SAMPLE_S,
         "flush_interval_s": FLUSH_S, "scrape_interval_s": SCRAPE_S}
    )  # fmt: skip
    total = 0
    next_report = start + REPORT_EVERY_S
    while clock.t < end:
        clock.t += SAMPLE_S
        runtime.tick()
        runtime.publish_pending()
        if len(batches) >= GROUP:
            total += _write(batches, clock.t)
        if progress and clock.t >= next_report:
            progress(clock.t)
            next_report += REPORT_EVERY_S
    total += _write(batches, clock.t)
    rollups.refresh_all()
    return total


def _sim_plan(host: Host) -> dict:
    return {"host": host.name, "collector": Host.Collector.SIMULATED}


def _write(batches: list[dict], now: float) -> int:
    """Ingest as of the simulated moment: a history longer than the raw samples kept
    (TELEMETRY_RAW_RETENTION_DAYS) would be refused as too old otherwise. Its rollups and
    events stay when retention later drops the old raw partitions, as a live fleet's do."""
    if not batches:
        return 0
    results = ingest_batches(batches, now=now)
    batches.clear()
    refused = [result for result in results if isinstance(result, BatchRejected)]
    for result in refused[:1]:  # one says why; they would all say the same
        log.warning("demo history: %d batches refused: %s", len(refused), result)
    return len(results) - len(refused)


def _before_deployments(host: Host, start: dt.datetime) -> list[Deployment]:
    """The time-shared replicas of the field report's starting point, stopped since the switch."""
    existing = list(host.deployments.filter(status=Deployment.Status.STOPPED))
    if existing:
        return existing
    spec = before_host()
    gpus = list(host.gpus.order_by("index"))
    shared = {card for deployment in spec.deployments for card in deployment.cards}
    # Seeded as they stood at the window's start, in one change dated then.
    with open_change(at=start):
        created = [
            create_deployment(host, gpus, {}, deployment, shared) for deployment in spec.deployments
        ]
        stopped = Deployment.objects.filter(pk__in=[d.pk for d in created])
        stopped.update(status=Deployment.Status.STOPPED)
        for deployment in stopped:
            record(
                actor=None,
                action=Action.DEMO_SEED,
                obj=deployment,
                before=None,
                after=snapshot(deployment),
                host=host,
                comment="time-shared replica of the field report, stopped since the switch",
            )
    return list(stopped)


def _record_switch(host: Host, before: list[Deployment], at: float) -> None:
    """The switch as the audit trail would have it: each model's placement before and after,
    as one change dated when it happened."""
    with open_change(at=_at(at)):
        for deployment in host.deployments.exclude(status=Deployment.Status.STOPPED):
            replaced = [d for d in before if d.served_model_id == deployment.served_model_id]
            record(
                actor=None,
                action=Action.DEPLOYMENT_CHANGE,
                obj=deployment,
                before=snapshot(replaced[0]) if replaced else None,
                after=snapshot(deployment),
                host=host,
                comment="isolated to its own GPU group; KV reserved at P95 + 20%, excess queued",
            )
