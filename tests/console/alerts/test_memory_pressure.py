"""The 95% rule by tenant kind, read from ingested samples: the card-memory alert and the
degradation watch judge the on-demand part, and a preallocating engine's full pool fires
only while the engine preempts or queues."""

import time

import pytest
from django.utils import timezone

from console.alerts.evaluator import run_cycle
from console.alerts.models import Alert, AlertRule
from console.operations import services, watch
from console.operations.models import DegradationRun, StandingPolicy
from inventory.ingest.writer import ingest_batch
from inventory.models import Event
from tests.batches import batch, card_row, engine_row, process_row
from tests.factories import GIB, DeploymentFactory, GpuFactory, ServedModelFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory_rule(settings):
    settings.ALERT_WEBHOOK_URL = ""
    settings.ALERT_EMAIL_TO = []
    settings.ALERT_ALERTMANAGER_URL = ""
    rule = AlertRule.objects.get(slug="card-memory-95")
    AlertRule.objects.exclude(pk=rule.pk).update(enabled=False)
    rule.for_s = 0
    rule.save()
    return rule


@pytest.fixture
def pools(personas):
    """An 80 GiB card with two vLLM tenants and a standing degradation policy."""
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    chat, batch_model = (
        DeploymentFactory(
            host=gpu.host, gpus=[gpu], runtime_name=name, kv_reservation_bytes=12 * GIB,
            served_model=ServedModelFactory(name=name, priority=priority, engine="vllm"),
        )
        for name, priority in (("chat", 1), ("batch", 3))
    )  # fmt: skip
    services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION
    )
    return gpu, chat, batch_model


def _report(gpu, used_gib, processes, *, engines=(), pids=None):
    now = time.time()
    rows = [
        process_row(gpu, pid, used_max=int(gib * GIB), used_last=int(gib * GIB), deployment=d)
        for pid, (d, gib) in zip(pids or range(100, 100 + len(processes)), processes, strict=True)
    ]
    used = int(used_gib * GIB)
    cards = [card_row(gpu, used_max=used, used_last=used, total=80 * GIB)]
    ingest_batch(batch(gpu.host, start=now - 10, end=now, cards=cards, processes=rows,
                       engines=engines))  # fmt: skip


def _firing():
    return list(Alert.objects.filter(state="firing"))


def test_pools_that_fill_the_card_by_their_settings_raise_nothing(memory_rule, pools):
    gpu, chat, batch_model = pools
    # 97.5% of the card by NVML, all of it the two pools (gate 5 allows such settings).
    _report(gpu, 78, [(chat, 40), (batch_model, 38)])
    run_cycle(timezone.now())
    watch.watch(timezone.now())
    assert _firing() == [] and not DegradationRun.objects.exists()


def test_a_job_beside_the_pools_fires_on_the_on_demand_part_and_degrades(memory_rule, pools):
    gpu, chat, batch_model = pools
    # The pools leave 79.53 - 60 = 19.53 GiB usable (479 MiB reserved); a job takes 19.
    _report(gpu, 79, [(chat, 40), (batch_model, 20), (None, 19)])
    run_cycle(timezone.now())
    (alert,) = _firing()
    assert alert.values["reason"] == "on_demand"
    assert alert.values["preallocated_bytes"] == 60 * GIB
    assert alert.values["on_demand_fraction"] == pytest.approx(19 / 19.532, abs=1e-3)
    watch.watch(timezone.now())
    run = DegradationRun.objects.get(gpu=gpu)
    assert [(s["kind"], s["deployment_id"]) for s in run.plan] == [("shrink_kv", batch_model.pk)]


def test_a_restarted_engine_is_counted_once(memory_rule, pools):
    gpu, chat, batch_model = pools
    _report(gpu, 79, [(chat, 40), (batch_model, 20), (None, 19)])
    # The batch engine restarted with a new PID; the old one is in the previous sample only.
    # Were both counted, the pools would seem to hold all the card and nothing would fire.
    _report(gpu, 79, [(chat, 40), (batch_model, 20), (None, 19)], pids=[100, 201, 102])
    run_cycle(timezone.now())
    (alert,) = _firing()
    assert alert.values["preallocated_bytes"] == 60 * GIB


def test_a_full_pool_fires_while_its_engine_preempts_and_never_degrades(memory_rule, pools):
    gpu, chat, batch_model = pools
    engines = [engine_row(chat, running=40, p99_s=1.0, kv_usage=0.99)]
    _report(gpu, 60.5, [(chat, 40), (batch_model, 20)], engines=engines)
    run_cycle(timezone.now())
    assert _firing() == []  # a full pool that serves everything is healthy
    Event.objects.create(
        host=gpu.host, deployment=chat, kind=Event.Kind.KV_PRESSURE, at=timezone.now(),
        detail={"reason": "preemptions", "preemptions": 12},
        batch_id="00000000-0000-4000-8000-000000000031", position=0,
    )  # fmt: skip
    run_cycle(timezone.now())
    (alert,) = _firing()
    assert (alert.values["reason"], alert.values["full_pools"]) == ("kv_pool", ["chat"])
    # The card has memory to spare: shrinking or stopping a neighbour frees nothing the full
    # pool could use before its engine restarts with a larger one.
    watch.watch(timezone.now())
    assert not DegradationRun.objects.exists()


def test_the_watch_asks_for_a_decision_only_on_cards_past_the_on_demand_limit(pools, monkeypatch):
    gpu, chat, batch_model = pools
    asked = []
    monkeypatch.setattr(watch.degradation, "on_card_over_limit", asked.append)
    _report(gpu, 78, [(chat, 40), (batch_model, 38)])  # 97.5% by NVML, all of it the pools
    watch.watch(timezone.now())
    assert asked == []  # no per-card reading each pass for a card its pools fill
    _report(gpu, 79, [(chat, 40), (batch_model, 20), (None, 19)])
    watch.watch(timezone.now())
    assert asked == [gpu.pk]
