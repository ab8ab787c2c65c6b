"""The demo's history: the 8-card host's switch to P95 reservations ends its OOMs."""

import datetime as dt
import time

import pytest

from console.core.models import AuditEntry
from console.proposals.loadtest.inputs import real_rates
from inventory.demo import ensure_demo_fleet
from inventory.demo_history import _simulate, backfill
from inventory.models import Deployment, Event, Host, IngestedBatch, ProcessSample
from inventory.telemetry.simulator.scenarios import demo_fleet_specs

pytestmark = pytest.mark.django_db


def test_ooms_before_the_switch_and_none_after():
    ensure_demo_fleet()
    now = time.time()
    written = backfill(days=3, now=now, only={"infer-01"})
    assert written["infer-01"] > 0
    host = Host.objects.get(name="infer-01")
    # The switch: one proposal per card group, each applied as a change of its own, the last
    # just before half-way through the window rather than when it ran.
    switches = AuditEntry.objects.filter(host=host, action="deployment.create")
    assert switches.count() == 3  # one per model
    assert switches.values("change_id").distinct().count() == 3
    half_way = dt.datetime.fromtimestamp(now - 3 * 86400 / 2, tz=dt.UTC)
    last = max(entry.at for entry in switches)
    assert half_way - dt.timedelta(minutes=15) < last < half_way
    for switch in switches:
        assert switch.after["isolation_mode"] == "gpu_group"
        assert switch.after["kv_reservation_basis"] == "p95"
    stops = AuditEntry.objects.filter(host=host, action="deployment.stop")
    assert {stop.before["isolation_mode"] for stop in stops} == {"time_slicing"}
    assert {stop.before["kv_reservation_basis"] for stop in stops} == {"mean"}
    first = min(entry.at for entry in switches)
    ooms = Event.objects.filter(host=host, kind=Event.Kind.OOM)
    assert ooms.filter(at__lt=first).exists()
    assert not ooms.filter(at__gte=first).exists()
    assert all(oom.cause for oom in ooms), "every OOM is triaged at ingest"
    # Before the switch the memory belongs to the stopped, time-shared replicas.
    stopped = host.deployments.filter(status=Deployment.Status.STOPPED)
    assert stopped.count() == stops.count() == 8
    assert ProcessSample.objects.filter(deployment__in=stopped, ts__lt=first).exists()
    # After it, to the card groups the proposals created.
    groups = host.deployments.filter(status=Deployment.Status.ACTIVE)
    assert ProcessSample.objects.filter(deployment__in=groups, ts__gt=half_way).exists()


def test_a_host_with_history_is_left_alone():
    ensure_demo_fleet()
    now = time.time()
    backfill(days=0.5, now=now, only={"a100-node"})
    assert backfill(days=0.5, now=now, only={"a100-node"}) == {}


def test_history_longer_than_the_raw_samples_kept_still_lands(settings):
    # Replayed as of its own moments: ingest would refuse days older than raw retention.
    settings.TELEMETRY_RAW_RETENTION_DAYS = 1
    ensure_demo_fleet()
    now = time.time()
    written = backfill(days=2.5, now=now, only={"a100-node"})
    host = Host.objects.get(name="a100-node")
    oldest = IngestedBatch.objects.filter(host=host).order_by("interval_end").first()
    assert written["a100-node"] == IngestedBatch.objects.filter(host=host).count()
    assert oldest.interval_end < dt.datetime.fromtimestamp(now - 2 * 86400, tz=dt.UTC)


def test_one_hosts_story_going_wrong_leaves_the_others_their_history(monkeypatch, caplog):
    ensure_demo_fleet()
    now = time.time()

    def broken(*args, **kwargs):
        raise RuntimeError("the switch did not pass its gates")

    monkeypatch.setattr("inventory.demo_history._switched_history", broken)
    written = backfill(days=0.5, now=now, only={"infer-01", "a100-node"})
    assert set(written) == {"a100-node"} and written["a100-node"] > 0
    assert "demo history: infer-01 failed" in caplog.text


def test_the_busy_hour_rate_from_history_is_the_traffic_the_simulator_served():
    # The history flushes every 10 minutes: each minute row holds ten minutes of requests.
    # Read as a minute's (before the windows were kept), the rate was ten times the traffic
    # and `loadtest --host infer-01` refused it as a rate no one could drive.
    ensure_demo_fleet()
    host = Host.objects.get(name="infer-00")
    end = (time.time() // 3600 - 1) * 3600  # one whole hour, the only one with history
    served: dict = {}
    spec = next(spec for spec in demo_fleet_specs() if spec.name == "infer-00")
    _simulate(host, spec, end - 3600, end, seed=0, rehearsal=served)
    deployments = list(host.deployments.select_related("served_model"))
    rates = real_rates([d.pk for d in deployments], dt.datetime.fromtimestamp(end, tz=dt.UTC))
    by_model: dict[str, list[float]] = {}
    for deployment in deployments:
        by_model.setdefault(deployment.served_model.name, [0.0, 0.0])[0] += rates[deployment.pk]
    for figures in served.values():
        by_model[figures["model"]][1] += figures["rate"]
    for model, (measured, simulated) in by_model.items():
        # The first scrape is a baseline: the rate is the last 55 minutes' of the hour's 60.
        assert measured == pytest.approx(simulated, rel=0.15), model
