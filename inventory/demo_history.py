"""History for the demo fleet: days of simulated telemetry written before the console opens.

The simulator runs faster than real time over the past few days, through the same host
runtime the live agent uses (collector, sampler, process mapping), and the batches go through
the same ingest as live ones. The 8-card host infer-01 starts the window as the field report
found it (three models time-sharing all eight cards, KV reserved at the mean, no admission
policy) and is switched half-way to its own card groups with P95 + 20% reservations. The
switch is a maintenance window: the card groups are rehearsed together for
`REHEARSAL` (the combined load test the proposals attach), then `switch_due` asks the
proposal workflow (console.proposals.demo: inventory sits below it) to file, check, approve
and apply one proposal per group, dated then; the OOM history shows OOMs before it and none
after. `host_history_written` tells it as soon as one host's history is in: the 8-card host
goes first, so the proposal that rests on its history waits for the approver minutes after
the start rather than once the whole fleet's is in.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import replace

from django.dispatch import Signal

from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.collection import collection_plan
from inventory.demo import SWITCHED_HOST
from inventory.ingest.writer import BatchRejected, ingest_batches
from inventory.models import Deployment, Host, IngestedBatch
from inventory.reports.backfill import BackfillProgress
from inventory.telemetry.simulator.scenarios import before_host, demo_fleet_specs
from inventory.timeseries import rollups

log = logging.getLogger(__name__)

# The maintenance window before the switch: the card groups run alone, load-tested together;
# the proposals are filed, checked, approved and applied in the minutes after it.
REHEARSAL = (3600.0, 900.0)  # seconds before the switch: from, to
# Sent with host, replicas (the time-shared deployments), spec (the card groups' HostSpec),
# rehearsal (per group: its test's figures) and at (the switch, epoch seconds).
switch_due = Signal()
# Sent with host (its name) and now (epoch seconds) once that host's whole history is in.
host_history_written = Signal()
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
    # The 8-card host first: a proposal waiting for the approver rests on its history.
    hosts.sort(key=lambda host: (host.name != SWITCHED_HOST, host.name))
    progress = BackfillProgress(days, [host.name for host in hosts])
    for host in hosts:
        report = progress.of(host.name, start, now)
        try:
            if host.name == SWITCHED_HOST:
                written[host.name] = _switched_history(host, specs[host.name], start, now, seed,
                                                       days, report)  # fmt: skip
            else:
                written[host.name] = _simulate(
                    host, specs[host.name], start, now, seed, progress=report
                )
            host_history_written.send(sender=backfill, host=host.name, now=now)
        except Exception:  # one host's story going wrong must not cost the others theirs
            log.exception("demo history: %s failed", host.name)
        else:
            log.info("demo history: %s, %d batches", host.name, written[host.name])
        progress.done(host.name)
    progress.finish()
    return written


def _switched_history(host, after, start, now, seed, days, report) -> int:
    switch = now - days * 86400 / 2
    replicas = list(host.deployments.exclude(status=Deployment.Status.STOPPED))
    before = replace(before_host(xid_per_card_day=0.02), name=host.name)
    rehearsal_start, rehearsal_end = switch - REHEARSAL[0], switch - REHEARSAL[1]
    written = _simulate(host, before, start, rehearsal_start, seed,
                        plan=_plan_for(host, replicas), progress=report)  # fmt: skip
    # The groups' engines are no deployment of the inventory yet: only their cards are mapped.
    rehearsal: dict[str, dict] = {}
    written += _simulate(host, after, rehearsal_start, rehearsal_end, seed,
                         plan=_plan_for(host, []), rehearsal=rehearsal)  # fmt: skip
    answers = switch_due.send(sender=backfill, host=host, replicas=replicas, spec=after,
                              rehearsal=rehearsal, at=switch)  # fmt: skip
    if not answers:
        raise RuntimeError("nothing switches the demo's 8-card host (console.proposals.demo)")
    return written + _simulate(host, after, switch, now, seed, progress=report)


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
    host,
    spec,
    start: float,
    end: float,
    seed: int,
    plan: dict | None = None,
    progress=None,
    rehearsal: dict | None = None,
) -> int:
    """Simulate and ingest [start, end); `rehearsal`, when given, receives each deployment's
    figures over the window, as the load test of its card group reports them."""
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
    at_start = None
    while clock.t < end:
        clock.t += SAMPLE_S
        runtime.tick()
        if at_start is None:  # the simulator has caught up with the window's start
            at_start = _replica_totals(simulator, host.name)
        runtime.publish_pending()
        if len(batches) >= GROUP:
            total += _write(batches, clock.t)
        if progress and clock.t >= next_report:
            progress(clock.t)
            next_report += REPORT_EVERY_S
    total += _write(batches, clock.t)
    rollups.refresh_all()
    if rehearsal is not None:
        rehearsal.update(_window_figures(simulator, host.name, at_start, start, clock.t))
    return total


def _replica_totals(simulator: FleetSimulator, host: str) -> dict:
    return {
        replica.spec.deployment_id: (replica.served_histogram.copy(), replica.served_total)
        for replica in simulator.fleet.hosts[host].replicas
    }


def _window_figures(simulator, host: str, at_start: dict, start: float, end: float) -> dict:
    figures = {}
    for replica in simulator.fleet.hosts[host].replicas:
        histogram, requests = at_start[replica.spec.deployment_id]
        window = replica.served_histogram.since(histogram)
        completed = replica.served_total - requests
        p99 = window.quantile(0.99)
        figures[replica.spec.deployment_id] = {
            "model": replica.spec.workload.model,
            "p99_ms": None if p99 is None else round(p99 * 1000, 1),
            "completed": int(completed),
            "rate": completed / (end - start),
            "start": start,
            "end": end,
        }
    return figures


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
