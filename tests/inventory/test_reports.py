"""The host page's analyses, on histories written through the real ingest."""

import datetime as dt
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inventory.analytics.fragmentation import Status
from inventory.analytics.kv_advisor import (
    AdmissionPolicy,
    KvDemandSample,
    KvFlag,
    advise_kv_reservation,
)
from inventory.analytics.stats import percentile
from inventory.models import Deployment
from inventory.reports import analysis
from inventory.reports.capacity import card_capacity
from inventory.reports.fleet import fleet_rows
from inventory.reports.ledger import card_views
from inventory.reports.series import host_charts
from inventory.timeseries import partitions, queries, rollups
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory, ServedModelFactory
from tests.inventory.analytics import copeak_reference, interference_reference

pytestmark = pytest.mark.django_db
MIB = 1024**2


@pytest.fixture
def shared_card():
    """Two deployments time-sharing one 80 GiB card for six hours."""
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    chat = DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        isolation_mode=Deployment.Isolation.TIME_SLICING,
        served_model=ServedModelFactory(name="chat", p99_latency_slo_ms=800),
        kv_reservation_bytes=4 * GIB,
        kv_reservation_basis=Deployment.KvBasis.MEAN,
        kv_tokens_per_request=2048,
        admission_policy=Deployment.Admission.NONE,
    )
    code = DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        isolation_mode=Deployment.Isolation.TIME_SLICING,
        served_model=ServedModelFactory(name="code", p99_latency_slo_ms=800),
        kv_tokens_per_request=2048,
    )
    start = (timezone.now() - dt.timedelta(hours=6)).timestamp()

    # Both peak together every hour from minute 40 to 45: 30 + 30 GiB usually, 37 + 37 then.
    def demand(minute, index):
        return (37 if 40 <= minute % 60 < 45 else 30) * GIB

    def running(minute, index):
        return 40.0 if 40 <= minute % 60 < 45 else 10.0

    def p99(minute, index):
        return 1.6 if 40 <= minute % 60 < 45 else 0.5  # the tail doubles while both are busy

    write_history(gpu.host, [(gpu, chat), (gpu, code)], start=start, minutes=360,
                  demand=demand, running=running, p99=p99)  # fmt: skip
    return gpu, chat, code


def test_copeak_sees_peaks_that_collide(shared_card):
    gpu, _chat, _ = shared_card
    (report,) = analysis.copeaks(gpu.host)
    assert report.card_id == str(gpu)
    # At the co-peak each holds 37 GiB allocated plus its 2 GiB pool: 78 GiB together.
    assert report.joint_peak_bytes == pytest.approx(78 * GIB)
    assert report.copeak_fraction == pytest.approx(30 / report.samples)


def test_copeaks_on_cards_shared_by_two_and_three_are_the_plain_python_figures():
    """Two cards, three deployments, one with two processes on a card, restarts: the figures
    match the computation the array code replaced, run over the history this test wrote (a
    minute a moment, by deployment the highest of its processes)."""
    host = GpuFactory(index=0, memory_total_bytes=80 * GIB).host
    g0, g1 = host.gpus.get(), GpuFactory(host=host, index=1, memory_total_bytes=80 * GIB)
    a, b, c = (
        DeploymentFactory(host=host, gpus=gpus, served_model=ServedModelFactory(name=name))
        for name, gpus in (("a", [g0, g1]), ("b", [g0, g1]), ("c", [g1]))
    )
    start = (timezone.now() - dt.timedelta(hours=4)).timestamp()
    # First two hours: a (two processes) and b on card 0, a, b and c on card 1. Then b and c
    # restart on card 1 and a alone on card 0, under new PIDs, for an hour.
    first = [(g0, a), (g0, b), (g1, b), (g1, c), (g1, a), (g0, a)]
    second = [(g1, b), (g1, c), (g0, a)]

    def early(minute, index):  # three tenants still fit card 1: a batch over it is refused
        return (3 + (minute * (index + 3)) % 11 + 2 * index) * GIB

    def late(minute, index):
        return (12 + (minute * (index + 2)) % 11) * GIB

    write_history(host, first, start=start, minutes=120, demand=early)
    write_history(host, second, start=start + 120 * 60, minutes=60, demand=late)
    expected: dict = {}
    for tenants, demand, offset, minutes in ((first, early, 0, 120), (second, late, 120, 60)):
        for minute in range(minutes):
            for index, (gpu, deployment) in enumerate(tenants):
                label = f"{deployment.served_model.name} #{deployment.pk}"
                held = demand(minute, index) + 2 * GIB  # the allocator's free pool too
                series = expected.setdefault(gpu.pk, {}).setdefault(label, {})
                series[offset + minute] = max(series.get(offset + minute, 0), held)

    reports = analysis.copeaks(host)
    assert [r.card_id for r in reports] == [str(g0), str(g1)]
    assert [r.samples for r in reports] == [120, 120]
    assert [len(r.deployments) for r in reports] == [2, 3]
    for report, gpu in zip(reports, (g0, g1), strict=True):
        tenancy = copeak_reference.longest_shared_tenancy(
            {label: sorted(s.items()) for label, s in expected[gpu.pk].items()}
        )
        assert copeak_reference.report_figures(report) == copeak_reference.copeak_figures(
            tenancy, capacity_bytes=80 * GIB
        )


def test_kv_advice_flags_a_mean_reservation_without_policy(shared_card):
    gpu, chat, _ = shared_card
    rows = {row.deployment.pk: row for row in analysis.kv_advice(gpu.host)}
    advice = rows[chat.pk].advice
    assert KvFlag.RESERVED_AT_MEAN in advice.flags
    assert KvFlag.NO_ADMISSION_POLICY in advice.flags
    assert advice.p95_concurrency == pytest.approx(40.0)
    # 40 requests x 2048 tokens x 128 KiB/token x 1.2
    assert advice.recommended_bytes == 40 * 2048 * 131072 * 12 // 10


def test_interference_shows_the_tail_rising_with_the_neighbour(shared_card):
    gpu, chat, _ = shared_card
    reports = {report.deployment: report for report in analysis.interference(gpu.host)}
    report = reports[f"chat #{chat.pk}"]
    assert report.verdict == "tail_rises"


def test_capacity_splits_allocated_demand_from_allocator_held_memory(shared_card):
    gpu, chat, _ = shared_card
    capacity = card_capacity(gpu)
    assert capacity.demand_peak[chat.pk] == 37 * GIB
    assert capacity.demand_p95[chat.pk] == 37 * GIB  # the peaks are 30 of 360 minutes: > 5%
    assert capacity.allocator_held_peak_bytes == 4 * GIB  # 2 GiB in each pool
    assert capacity.joint_peak_bytes == 74 * GIB
    # 1 - 1 GiB largest block / 2 GiB free in the pool
    assert capacity.fragmentation_index_peak == pytest.approx(0.5)
    assert capacity.fragmentation_status == "red"


def test_capacity_counts_what_nvml_sees_outside_the_allocator_as_demand():
    # The H200 check measured 518 MiB of CUDA context per process (docs/gpu-check.md): NVML
    # per-process used minus the allocator's reserved pool.
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    chat = DeploymentFactory(host=gpu.host, gpus=[gpu])
    start = (timezone.now() - dt.timedelta(hours=1)).timestamp()
    write_history(gpu.host, [(gpu, chat)], start=start, minutes=30,
                  demand=lambda minute, index: 30 * GIB, context=518 * MIB)  # fmt: skip
    capacity = card_capacity(gpu)
    assert capacity.context_p95[chat.pk] == 518 * MIB
    assert capacity.context_estimated == frozenset()
    assert capacity.demand_p95[chat.pk] == 30 * GIB + 518 * MIB
    # Allocated + context + the 2 GiB pool held: all NVML showed as used, nothing twice.
    assert capacity.joint_peak_bytes + capacity.allocator_held_peak_bytes == 32 * GIB + 518 * MIB
    (view,) = card_views(gpu.host)
    context = [line for line in view.ledger.lines if line.kind.value == "cuda_context"]
    assert [(line.bytes, line.basis.value) for line in context] == [(518 * MIB, "measured")]


def test_a_tensor_parallel_deployment_holds_nccl_buffers_on_each_card_a_single_card_none():
    # NCCL's default buffers, outside PyTorch's allocator: 32 channels x (4 MiB Simple +
    # 512 KiB LL + 4800 KiB LL128) on each card of the group (inventory.analytics.context).
    first = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    second = GpuFactory(host=first.host, index=1, memory_total_bytes=80 * GIB)
    alone = GpuFactory(host=first.host, index=2, memory_total_bytes=80 * GIB)
    tp = DeploymentFactory(host=first.host, gpus=[first, second])
    single = DeploymentFactory(host=first.host, gpus=[alone])
    start = (timezone.now() - dt.timedelta(minutes=20)).timestamp()
    write_history(first.host, [(first, tp), (second, tp), (alone, single)], start=start,
                  minutes=10, demand=lambda minute, index: 30 * GIB, context=900 * MIB)  # fmt: skip
    views = {view.gpu.index: view.ledger for view in card_views(first.host)}
    for index in (0, 1):
        nccl = [line for line in views[index].lines if line.kind.value == "communication_buffers"]
        assert [(line.bytes, line.basis.value) for line in nccl] == [(294 * MIB, "estimated")]
        # NVML's 900 MiB beside the allocator pool: NCCL's part, the rest the CUDA context
        context = [line for line in views[index].lines if line.kind.value == "cuda_context"]
        assert [line.bytes for line in context] == [900 * MIB - 294 * MIB]
    assert not [line for line in views[2].lines if line.kind.value == "communication_buffers"]


def test_the_ledger_shows_the_engines_pool_in_use_and_the_policy_reservation_apart(client_as):
    # vllm_metrics_live.txt (tests/fixtures/engines): llava-1.5-7b, whose language model has
    # 32 layers and 32 KV heads of 128 in fp16 (2 x 32 x 32 x 128 x 2 = 512 KiB a token),
    # reported num_gpu_blocks 6400 x block_size 16 at gpu_memory_utilization 0.92 and 31.4%
    # usage: a pool of 102,400 tokens x 512 KiB = 50 GiB, 15.7 GiB of it in use.
    from inventory.telemetry.engines import parse_vllm_metrics

    reading = parse_vllm_metrics(
        (Path(__file__).parents[1] / "fixtures/engines/vllm_metrics_live.txt").read_text()
    )
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    llava = DeploymentFactory(
        host=gpu.host, gpus=[gpu], kv_reservation_bytes=20 * GIB,
        served_model=ServedModelFactory(name="llava", num_layers=32, num_kv_heads=32,
                                        head_dim=128, kv_dtype="fp16", weights_bytes=14 * GIB),
    )  # fmt: skip
    start = (timezone.now() - dt.timedelta(minutes=10)).timestamp()
    pool = {
        "kv_pool_tokens": reading.kv_pool_tokens,
        "kv_pool_bytes": reading.kv_pool_bytes,
        "memory_fraction": reading.memory_fraction,
    }
    write_history(gpu.host, [(gpu, llava)], start=start, minutes=5,
                  demand=lambda minute, index: 70 * GIB, running=lambda minute, index: 2.0,
                  p99=lambda minute, index: 0.3, pool=pool)  # fmt: skip
    (view,) = card_views(gpu.host)
    ((name, figures),) = view.kv_pools
    assert name == "llava"
    assert figures.pool_bytes == 102_400 * 524_288 == 50 * GIB
    assert figures.pool_source == "engine_blocks"
    assert figures.reserved_by_policy_bytes == 20 * GIB
    assert figures.memory_fraction == pytest.approx(0.92)
    # tests.batches reports 50% usage: of the engine's 50 GiB, not of the 20 GiB reservation.
    assert figures.in_use_bytes == 25 * GIB
    kv = {line.kind.value: line for line in view.ledger.lines if line.kind.value.startswith("kv")}
    assert kv["kv_cache_used"].bytes == 25 * GIB
    assert kv["kv_cache_reserved_unused"].bytes == 25 * GIB
    assert kv["kv_cache_used"].basis.value == "measured"
    page = client_as("oncall").get(f"/hosts/{gpu.host.name}/")
    assert page.context["kv_pools"] == [(gpu, "llava", figures)]
    assert 'id="kv-pools"' in page.content.decode()


def test_the_ledger_sums_to_the_card_and_reads_red_by_fragmentation(shared_card):
    gpu, _chat, _ = shared_card
    (view,) = card_views(gpu.host)
    assert sum(line.bytes for line in view.ledger.lines) == view.ledger.total_bytes
    kinds = {line.kind.value for line in view.ledger.lines}
    assert {"model_weights", "fragmentation", "free"} <= kinds
    assert view.status.status is Status.RED
    assert "fragmentation red" in view.status.reason


def test_the_ledger_at_a_past_moment_uses_the_samples_of_that_moment(shared_card):
    gpu, _chat, _ = shared_card
    _, free_at_peak = _free_at(gpu, minutes_ago=360 - 42)
    _, free_when_calm = _free_at(gpu, minutes_ago=360 - 20)
    assert free_at_peak < free_when_calm  # less free at the co-peak


def _free_at(gpu, minutes_ago):
    (view,) = card_views(gpu.host, timezone.now() - dt.timedelta(minutes=minutes_ago))
    free = sum(line.bytes for line in view.ledger.lines if line.kind.value == "free")
    return view.at, free


def test_heatmaps_put_each_card_on_a_row(shared_card):
    gpu, _chat, _ = shared_card
    data = host_charts(gpu.host, "24h")
    assert data["cards"] == ["card 0"]
    assert len(data["used_pct"][0]) == len(data["times"]) > 0
    assert max(v for v in data["used_pct"][0] if v is not None) == pytest.approx(
        78 / 80 * 100, 0.01
    )
    labels = {line["label"] for line in data["deployments"]}
    assert labels == {"chat on card 0", "code on card 0"}


def test_the_fleet_row_reports_headroom_of_the_best_card_and_problems(shared_card):
    gpu, _chat, _ = shared_card
    (row,) = fleet_rows([gpu.host])
    assert row.largest_headroom_bytes == 80 * GIB - 479 * 1024**2 - 78 * GIB
    assert row.fragmentation_status == "red"
    assert row.p99_status == "red"  # 1.6 s against an 800 ms SLO
    assert row.problems


def test_a_mig_gpu_instance_has_one_ledger_for_its_compute_instances(client_as):
    # The H200 MIG capture's layout: 1c.3g.71gb and 2c.3g.71gb in one 3g.71gb GPU instance
    # (71,424 MiB). NVML reports the instance's memory on both devices; it is counted once.
    import time

    from inventory.ingest.writer import ingest_batches
    from inventory.models import Gpu
    from tests.batches import batch, card_row, process_row
    from tests.factories import MigSliceFactory

    gpu = GpuFactory(index=0, product_name="NVIDIA H200", memory_total_bytes=143771 * MIB,
                     mig_mode=Gpu.MigMode.ENABLED)  # fmt: skip
    devices = [
        MigSliceFactory(gpu=gpu, profile_name=name, start_slot=0, size_slots=4,
                        memory_bytes=71424 * MIB, gpu_instance_id=2, compute_instance_id=ci,
                        uuid=f"MIG-0000000{ci}-0000-0000-0000-000000000000")
        for ci, name in enumerate(("1c.3g.71gb", "2c.3g.71gb"))
    ]  # fmt: skip
    chat, code = (
        DeploymentFactory(host=gpu.host, isolation_mode=Deployment.Isolation.MIG,
                          mig_slice=device, served_model=ServedModelFactory(name=name),
                          kv_reservation_bytes=0, kv_reservation_basis=Deployment.KvBasis.NONE)
        for device, name in zip(devices, ("chat", "code"), strict=True)
    )  # fmt: skip
    now = time.time()
    card = card_row(gpu, used_max=20 * GIB, used_last=20 * GIB, total=143771 * MIB)
    mig_rows = [
        {"card_index": 0, "card_uuid": gpu.uuid, "uuid": device.uuid, "gpu_instance_id": 2,
         "compute_instance_id": device.compute_instance_id, "profile": device.profile_name,
         "total_bytes": 71424 * MIB, "used_bytes_max": 18 * GIB, "used_bytes_last": 18 * GIB,
         "free_bytes_min": 71424 * MIB - 18 * GIB, "free_bytes_last": 71424 * MIB - 18 * GIB}
        for device in devices
    ]  # fmt: skip
    processes = []
    for pid, (device, deployment, held) in enumerate(
        [(devices[0], chat, 10 * GIB), (devices[1], code, 8 * GIB)], start=100
    ):
        row = process_row(gpu, pid, used_max=held, used_last=held, deployment=deployment)
        row.update(mig_device_uuid=device.uuid, gpu_instance_id=2,
                   compute_instance_id=device.compute_instance_id)  # fmt: skip
        processes.append(row)
    payload = batch(gpu.host, start=now - 60, end=now, cards=[card], processes=processes)
    payload["mig_devices"] = mig_rows
    ingest_batches([payload])

    from inventory.reports.ledger import mig_instance_views

    (view,) = mig_instance_views(gpu.host)
    assert view.label == f"{gpu} GI 3g.71gb@0"
    assert view.ledger.total_bytes == 71424 * MIB
    assert sum(line.bytes for line in view.ledger.lines) == 71424 * MIB
    assert {line.deployment for line in view.ledger.lines if line.deployment} == {"chat", "code"}
    # Measured: both compute instances' processes, as NVML reported them.
    assert {line.pid for line in view.ledger.lines if line.pid} == {100, 101}
    assert view.ledger.free_bytes == 71424 * MIB - 18 * GIB
    page = client_as("oncall").get(f"/hosts/{gpu.host.name}/")
    cards = [card["card"] for card in page.context["ledger_data"]]
    assert cards == [view.label]  # the instance, not the whole card twice over


def test_the_fragment_reads_the_peaks_once_and_the_minutes_only_of_card_sharers(
    shared_card, client_as, monkeypatch
):
    gpu, chat, code = shared_card
    alone = DeploymentFactory(host=gpu.host, gpus=[GpuFactory(host=gpu.host, index=1)])
    reads = []

    def spy(name):
        real = getattr(queries, name)

        def read(ids, start, end):
            reads.append((name, sorted(ids), end - start))
            return real(ids, start, end)

        monkeypatch.setattr(queries, name, read)

    spy("running_peaks")
    spy("load_and_latency")
    client = client_as("manager")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(f"/hosts/{gpu.host.name}/analysis/")
    assert response.status_code == 200
    assert reads == [
        ("running_peaks", sorted([chat.pk, code.pk, alone.pk]), analysis.KV_WINDOW),
        # The card-sharing pair: `alone` has no co-tenant, so no minute of it can matter.
        ("load_and_latency", sorted([chat.pk, code.pk]), analysis.INTERFERENCE_WINDOW),
    ]
    engine_reads = [q for q in captured.captured_queries if "engine_minutes_1h" in q["sql"]]
    assert len(engine_reads) == 2
    # The packs, not the minute rows: a week of minutes is a row an hour.
    assert not [q for q in captured.captured_queries if "_rollup_1m" in q["sql"]]
    # Session, user, preferences, 2 permission sets, host; deployments and their cards once
    # for both analyses; peaks; co-peaks' tenants, cards, memory minutes and names; minutes.
    # Not the navigation's roles or firing alerts: a fragment shows no navigation.
    asked = [q["sql"][:70] for q in captured.captured_queries]
    assert len(asked) == 14, "\n".join(asked)


def test_the_advice_from_the_database_peaks_is_the_advice_from_every_minute():
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    deployment = DeploymentFactory(
        host=gpu.host, gpus=[gpu], kv_tokens_per_request=2048, kv_reservation_bytes=9 * GIB,
        served_model=ServedModelFactory(name="chat"),
    )  # fmt: skip
    now = timezone.now()
    partitions.ensure_partitions(now - dt.timedelta(days=8, hours=1), now)
    with connection.cursor() as cursor:
        # Eight days of minutes, some missing, some without a peak, fractions and bursts; the
        # first day lies outside the KV window.
        cursor.execute(
            "INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, running_max, "
            "running_sum, running_count, requests) "
            "SELECT %s, date_trunc('minute', %s::timestamptz) - m * interval '1 minute', 6, "
            "CASE WHEN m %% 97 = 3 THEN NULL ELSE (m * 37 %% 101) / 7.0 "
            "+ CASE WHEN m %% 700 < 6 THEN 25 ELSE 0 END END, 60, 6, 120 "
            "FROM generate_series(0, 8 * 1440) m WHERE m %% 13 <> 5",
            [deployment.pk, now],
        )
    rollups.pack_hours(now - dt.timedelta(days=8, hours=1), now)  # as a refresh packs them
    minutes = queries.engine_minutes([deployment.pk], now - analysis.KV_WINDOW, now)
    samples = [
        KvDemandSample(minute.at, minute.running_max)
        for minute in minutes[deployment.pk]
        if minute.running_max is not None
    ]
    assert 9000 < len(samples) < len(minutes[deployment.pk]) < 7 * 1440
    model = deployment.served_model
    # What the host page computed before it read the peaks alone: every minute, timed.
    expected = advise_kv_reservation(
        "chat", samples, current_reservation_bytes=deployment.kv_reservation_bytes,
        bytes_per_token=model.effective_kv_bytes_per_token, tokens_per_request=2048,
        buffer=settings.KV_BUFFER, admission_policy=AdmissionPolicy.QUEUE,
        now=now.timestamp(), shape=model.kv_shape(),
    )  # fmt: skip
    (row,) = analysis.kv_advice(gpu.host, now)
    assert row.advice == expected
    assert expected.excursions_in_window > 1 and expected.p95_concurrency % 1


def test_interference_from_the_minutes_arrays_is_the_interference_from_every_minute():
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    sharing = [
        DeploymentFactory(host=gpu.host, gpus=[gpu], served_model=ServedModelFactory(name=name))
        for name in ("chat", "code", "embed")
    ]
    now = timezone.now()
    partitions.ensure_partitions(now - dt.timedelta(days=3), now)
    with connection.cursor() as cursor:
        # Three days of minutes (the first outside the window), some missing, some without a
        # peak or a latency, five-minute gaps (stale loads), loads that tie and straddle each
        # one's half P95.
        for n, deployment in enumerate(sharing):
            cursor.execute(
                "INSERT INTO inventory_engine_rollup_1m (deployment_id, bucket, samples, "
                "running_max, running_sum, running_count, requests, latency_p99_max) "
                "SELECT %s, date_trunc('minute', %s::timestamptz) - m * interval '1 minute', 6, "
                "CASE WHEN m %% 89 = %s THEN NULL ELSE ((m + %s) * 37 %% 101) / 7.0 END, "
                "60, 6, 120, "
                "CASE WHEN m %% 31 = 2 THEN NULL ELSE ((m * 13 + %s) %% 17) / 10.0 END "
                "FROM generate_series(0, 3 * 1440) m "
                "WHERE m %% (11 + %s) <> 5 AND (m + 40 * %s) %% 600 >= 5",
                [deployment.pk, now, n, 7 * n, n, n, n],
            )
    rollups.pack_hours(now - dt.timedelta(days=3), now)  # as a refresh packs them
    # What the host page computed before it read arrays: every minute a tuple, every latency
    # looked up one by one in every co-tenant's load.
    minutes = queries.engine_minutes(
        [d.pk for d in sharing], now - analysis.INTERFERENCE_WINDOW, now
    )
    label = {d.pk: f"{d.served_model.name} #{d.pk}" for d in sharing}
    load, latencies = {}, {}
    for deployment in sharing:
        rows = minutes[deployment.pk]
        typical = percentile([m.running_max for m in rows if m.running_max is not None], 95)
        load[label[deployment.pk]] = [(m.at, (m.running_max or 0) / typical) for m in rows]
        latencies[label[deployment.pk]] = [
            (m.at, m.latency_p99_max) for m in rows if m.latency_p99_max is not None
        ]
    reports = analysis.interference(gpu.host, now)
    assert [r.deployment for r in reports] == sorted(label.values())
    for report in reports:
        expected = interference_reference.interference_figures(
            latencies[report.deployment],
            {other: load[other] for other in report.cotenants},
            busy_threshold=analysis.BUSY_SHARE_OF_P95,
            max_age_s=120.0,
        )
        assert interference_reference.report_figures(report) == expected
        assert report.busy_samples > 100 and report.idle_samples > 100
        assert report.unknown_samples
