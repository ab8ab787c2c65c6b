"""The demo's first minutes: the simulated fleet's scripted incidents, collected by the agent
runtime, written by the real ingest path and evaluated by the default rules, make the 95% rule,
an OOM, an MPS crash and a stale collector fire and then resolve."""

import datetime as dt
import time

import pytest

from console.alerts.evaluator import run_cycle
from console.alerts.models import Alert
from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.collection import collection_plan
from inventory.demo import _create_host
from inventory.ingest.writer import ingest_batch
from inventory.telemetry.simulator.incidents import DEMO_INCIDENTS
from inventory.telemetry.simulator.scenarios import demo_fleet_specs

pytestmark = pytest.mark.django_db

EXPECTED = {"card-memory-95", "oom", "mps-server-down", "collector-stale"}


class Clock:
    def __init__(self, start: float):
        self.t = start

    def __call__(self) -> float:
        return self.t


def test_the_scripted_incidents_fire_and_resolve_within_seven_minutes(settings):
    settings.ALERT_WEBHOOK_URL = ""
    hosts = [_create_host(spec) for spec in demo_fleet_specs()]
    # Seven minutes in the past, so the run ends near now (ingest refuses batches from the future).
    clock = Clock(time.time() - 420)
    simulator = FleetSimulator(seed=0, clock=clock, incidents=DEMO_INCIDENTS)
    runtimes = []
    for host in hosts:
        plan = {**collection_plan(host), "flush_interval_s": 10.0}
        runtime = HostRuntime(host.name, simulator.source_for(plan), ingest_batch)
        runtime.apply_plan(plan)
        runtimes.append(runtime)
    seen: dict[str, set[str]] = {}
    for second in range(1, 420):
        clock.t += 1
        for runtime in runtimes:
            if clock() >= runtime.next_poll:
                runtime.tick()
                runtime.publish_pending()
        if second % 15 == 0:
            run_cycle(dt.datetime.fromtimestamp(clock(), tz=dt.UTC))
            for slug, state in Alert.objects.values_list("rule__slug", "state"):
                seen.setdefault(slug, set()).add(state)
    for slug in EXPECTED:
        assert {"firing", "resolved"} <= seen.get(slug, set()), (slug, seen)
    surge = Alert.objects.get(rule__slug="card-memory-95", host__name="infer-01")
    assert surge.labels["gpu"] == "6" and surge.values["used_fraction"] > 0.95
    assert Alert.objects.get(rule__slug="collector-stale").host.name == "mig-h200"
