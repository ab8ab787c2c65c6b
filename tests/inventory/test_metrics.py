"""GET /metrics: derived figures in Prometheus' text format, with dcgm-exporter's labels, read
by prometheus_client's parser and by a real Prometheus that joins them with DCGM's series."""

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from inventory.models import Deployment, Event, Gpu
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory, MigSliceFactory, ServedModelFactory
from tests.processes import free_port, wait_for, wait_for_port
from tests.tokens import token_for

DCGM_PAGE = Path(__file__).parents[1] / "fixtures" / "dcgm-exporter" / "metrics.prom"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
# The cards of the dcgm-exporter page in tests/fixtures: the same hosts, indexes and UUIDs.
H100_UUID = "GPU-5e3b1f0c-7a2d-4c11-9e8f-0d6a2b4c8e10"
H200_UUID = "GPU-a1c2e3f4-0b1d-4e5f-8a9b-7c6d5e4f3a21"
# tests.batches: 80 GiB card, 479 MiB driver reserve, 30 GiB demand + 2 GiB the allocator keeps.
HEADROOM = 80 * GIB - 479 * 1024**2 - 32 * GIB


def _fleet():
    """infer-09 (one H100 with a deployment, 20 minutes of history) and mig-h200 (an H200
    with two 3g.71gb GPU instances, an Xid on the first)."""
    gpu = GpuFactory(host__name="infer-09", index=0, uuid=H100_UUID, memory_total_bytes=80 * GIB)
    deployment = DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        served_model=ServedModelFactory(name="chat"),
        kv_reservation_bytes=GIB,
        kv_reservation_basis=Deployment.KvBasis.MEAN,
        kv_tokens_per_request=1000,
    )
    write_history(gpu.host, [(gpu, deployment)],
                  start=(timezone.now() - dt.timedelta(minutes=20)).timestamp(), minutes=20,
                  demand=lambda m, i: 30 * GIB, running=lambda m, i: 10.0,
                  p99=lambda m, i: 0.3)  # fmt: skip
    mig = MigSliceFactory(gpu__host__name="mig-h200", gpu__index=0, gpu__uuid=H200_UUID,
                          profile_name="1c.3g.71gb", gpu_instance_id=1,
                          compute_instance_id=0).gpu  # fmt: skip
    MigSliceFactory(gpu=mig, start_slot=4, gpu_instance_id=2, compute_instance_id=0)
    _event(mig, Event.Kind.XID, 1, xid=31, detail={"xid": 31, "gpu_instance_id": 1})
    return gpu, deployment, mig


def _event(gpu: Gpu, kind: str, position: int, hours_ago: float = 1.0, **fields) -> None:
    Event.objects.create(host=gpu.host, gpu=gpu, kind=kind, position=position,
                         at=timezone.now() - dt.timedelta(hours=hours_ago),
                         batch_id=f"00000000-0000-4000-8000-{position:012d}",
                         **fields)  # fmt: skip


def _scrape(client, token, query="") -> tuple[dict, dict]:
    """(value by (name, sorted labels), type by family name) of one scrape."""
    response = client.get("/metrics" + query, HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200
    families = list(text_string_to_metric_families(response.content.decode()))
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples
    }
    return samples, {family.name: family.type for family in families}


def _card(host, gpu, instance=None):
    labels = {"Hostname": host, "gpu": "0", "UUID": gpu.uuid, "device": "nvidia0",
              "modelName": gpu.product_name}  # fmt: skip
    if instance is not None:
        labels.update(GPU_I_ID=instance[0], GPU_I_PROFILE=instance[1])
    return labels


def _key(name, labels):
    return (name, tuple(sorted(labels.items())))


@pytest.mark.django_db
def test_the_figures_carry_dcgm_exporters_labels_and_events_are_counters(client, personas):
    gpu, deployment, mig = _fleet()
    token = token_for(personas["manager"])
    samples, types = _scrape(client, token)

    card = _card("infer-09", gpu)
    assert card["modelName"] == "NVIDIA H100 80GB HBM3"
    assert samples[_key("gpu_console_card_fragmentation_index", card)] == pytest.approx(0.5)
    assert samples[_key("gpu_console_card_headroom_bytes", card)] == HEADROOM
    labels = {"Hostname": "infer-09", "deployment": str(deployment.pk), "model": "chat"}
    # 10 requests x 1000 tokens x 128 KiB x 1.2 - 1 GiB
    gap = samples[_key("gpu_console_kv_reservation_gap_bytes", labels)]
    assert gap == pytest.approx(10 * 1000 * 131072 * 1.2 - GIB)
    assert (
        _key("gpu_console_collector_last_sample_age_seconds", {"Hostname": "infer-09"}) in samples
    )

    # Counters over the whole stored history: every card starts at 0 OOMs...
    assert types["gpu_console_oom_events"] == types["gpu_console_xid_events"] == "counter"
    whole = {**card, "GPU_I_ID": "", "GPU_I_PROFILE": ""}
    assert samples[_key("gpu_console_oom_events_total", whole)] == 0
    # ... and an Xid on a MIG GPU instance is that instance's series, with its GI profile.
    xid = {**_card("mig-h200", mig, ("1", "3g.71gb")), "xid": "31", "xid_class": "application"}
    assert samples[_key("gpu_console_xid_events_total", xid)] == 1

    # An OOM stored late with an old timestamp still counts: the count never goes down, and
    # one from two days ago is counted where a 24-hour gauge would have dropped it.
    _event(gpu, Event.Kind.OOM, 2, hours_ago=48)
    _event(gpu, Event.Kind.OOM, 3, hours_ago=0.1)
    _event(mig, Event.Kind.XID, 4, xid=140, detail={"xid": 140, "gpu_instance_id": 1})
    later, _ = _scrape(client, token)
    assert later[_key("gpu_console_oom_events_total", whole)] == 2
    hardware = {**xid, "xid": "140", "xid_class": "hardware"}
    assert later[_key("gpu_console_xid_events_total", hardware)] == 1
    counters = [k for k in samples if k[0].endswith("_total")]
    assert all(later[k] >= samples[k] for k in counters)
    assert not any(name == "gpu_console_ooms_24h" for name, _ in later)


class _Prometheus:
    """Debian's prometheus on a free port, scraping the targets of `jobs` every second."""

    def __init__(self, tmp_path: Path, jobs: str):
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(f"global:\n  scrape_interval: 1s\nscrape_configs:\n{jobs}")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=(tmp_path / "prometheus.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        wait_for_port(self.port, "prometheus", timeout=30)
        # The port opens before the storage is loaded; the API answers 503 until then.
        wait_for(self._ready, timeout=60, what="prometheus ready",
                 logs=lambda: (tmp_path / "prometheus.log").read_text())  # fmt: skip

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5):
                return True
        except OSError:  # refused, or 503 (an HTTPError) while it starts
            return False

    def api(self, path: str, **params) -> list:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]

    def query(self, promql: str, timeout: float = 30.0) -> list:
        """The query's result once it has one (the first scrapes take a few seconds)."""
        deadline = time.monotonic() + timeout
        while not (result := self.api("query", query=promql)["result"]):
            assert time.monotonic() < deadline, f"no result for {promql}"
            time.sleep(0.5)
        return result

    def stop(self):
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=10)


def test_shards_split_the_hosts_each_in_exactly_one_and_the_same_figures(client, personas):
    _fleet()
    for index in range(5):
        GpuFactory(host__name=f"spare-{index}", index=0)
    token = token_for(personas["manager"])
    whole, _ = _scrape(client, token)

    def hosts(samples):
        return {dict(labels)["Hostname"] for _, labels in samples if "Hostname" in dict(labels)}

    shards = [_scrape(client, token, f"?shard={k}/3")[0] for k in range(3)]
    assert all(hosts(shard) for shard in shards)  # seven hosts over three shards
    for one, other in [(0, 1), (0, 2), (1, 2)]:
        assert not hosts(shards[one]) & hosts(shards[other])
    # together, every series of the whole page with its value
    together = {key: value for shard in shards for key, value in shard.items()}
    assert set(together) == set(whole)

    def steady(samples):  # an age grows between two scrapes
        return {key: value for key, value in samples.items() if "age_seconds" not in key[0]}

    assert steady(together) == steady(whole)
    assert steady(_scrape(client, token, "?shard=0/1")[0]) == steady(whole)


@pytest.mark.parametrize("shard", ["3/3", "1/0", "-1/2", "a/b", "0/2000", "1", "0/2/3", "٠/٢"])
def test_a_shard_that_is_not_k_of_n_is_a_400_naming_the_form(client, personas, shard):
    token = token_for(personas["manager"])
    answer = client.get("/metrics", {"shard": shard}, HTTP_AUTHORIZATION=f"Token {token}")
    assert answer.status_code == 400
    assert "K/N" in answer.content.decode()


@pytest.fixture
def dcgm_exporter():
    """The fixture dcgm-exporter page served at /metrics.prom on a free port."""
    handler = partial(SimpleHTTPRequestHandler, directory=str(DCGM_PAGE.parent))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_real_prometheus_scrapes_the_console_and_joins_it_with_dcgm(
    tmp_path, live_server, personas, dcgm_exporter
):
    if not os.path.exists(PROMETHEUS):
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    gpu, _, mig = _fleet()
    token = token_for(personas["manager"])
    console = urllib.parse.urlsplit(live_server.url).netloc
    prometheus = _Prometheus(tmp_path, f"""\
  - job_name: console
    authorization: {{type: Token, credentials: "{token}"}}
    static_configs: [{{targets: ["{console}"]}}]
  - job_name: dcgm
    metrics_path: /metrics.prom
    static_configs: [{{targets: ["{dcgm_exporter}"]}}]
""")  # fmt: skip
    try:
        # The console's headroom beside DCGM's free memory, card by card: one on (Hostname,
        # gpu, UUID) match, so every label the join needs has dcgm-exporter's name and value.
        (row,) = prometheus.query(
            "gpu_console_card_headroom_bytes / 1048576"
            " - on (Hostname, gpu, UUID) DCGM_FI_DEV_FB_FREE"
        )
        assert row["metric"]["Hostname"] == "infer-09" and row["metric"]["UUID"] == gpu.uuid
        assert float(row["value"][1]) == pytest.approx(HEADROOM / 1048576 - 48571)
        # A MIG GPU instance's Xids meet DCGM's series of that instance, and no other.
        (instance,) = prometheus.query(
            "gpu_console_xid_events_total and on (Hostname, UUID, GPU_I_ID, GPU_I_PROFILE)"
            " DCGM_FI_DEV_FB_USED"
        )
        assert instance["metric"]["GPU_I_ID"] == "1" and instance["metric"]["UUID"] == mig.uuid
        metadata = prometheus.api("metadata", metric="gpu_console_oom_events_total")
        assert metadata["gpu_console_oom_events_total"][0]["type"] == "counter"
    finally:
        prometheus.stop()
