"""A host collected through the real NVML code path (the agent runtime, the collector, the fake
NVML): its engine log's OOM, its process exits and restarts, its MPS daemon land as events with
a snapshot, triage and the live MPS state, as the simulator's events do."""

import datetime as dt
import json

import pytest
from django.utils import timezone

from inventory.agent.mps import MpsControl, MpsMonitor
from inventory.agent.runtime import HostRuntime
from inventory.agent.signals import SignalOptions
from inventory.agent.sources import NvmlSource
from inventory.ingest.writer import ingest_batch
from inventory.models import CollectorStatus, Event, Host
from inventory.telemetry.fake_nvml import FakeProcess
from inventory.telemetry.process_events import LifecycleSettings
from tests.factories import DeploymentFactory, GpuFactory, HostFactory
from tests.inventory.agent.test_signals import FAKE_MPS_CONTROL
from tests.inventory.telemetry.conftest import h100_card, nvml_for

pytestmark = pytest.mark.django_db
GIB = 2**30


class Clock:
    def __init__(self):
        self.t = (timezone.now() - dt.timedelta(minutes=5)).timestamp()

    def __call__(self):
        return self.t


def test_a_real_hosts_signals_land_as_events_with_snapshot_and_triage(tmp_path):
    host = HostFactory(name="gpu-real-01", collector=Host.Collector.NVML)
    server = FakeProcess(900, "nvidia-cuda-mps-server", GIB // 4)
    chat = FakeProcess(901, "/srv/chat/bin/python3", 60 * GIB, kind="mps")
    embedder = FakeProcess(902, "/srv/embed/bin/python3", 15 * GIB, kind="mps")
    card = h100_card(host.name, 0, [server, chat, embedder])
    gpu = GpuFactory(host=host, index=0, uuid=card.uuid, memory_total_bytes=card.total_bytes)
    chat_deployment = DeploymentFactory(host=host, gpus=[gpu], served_model__name="chat")
    embedder_deployment = DeploymentFactory(host=host, gpus=[gpu], served_model__name="embed")
    log = tmp_path / "chat.log"
    log.write_text("")
    pipe_dir = tmp_path / "mps"
    pipe_dir.mkdir()
    (pipe_dir / "daemon.json").write_text(json.dumps({"servers": {"900": [901, 902]}}))
    monitor = MpsMonitor(MpsControl(FAKE_MPS_CONTROL, str(pipe_dir)))
    clock = Clock()
    batches = []
    options = SignalOptions(lifecycle=LifecycleSettings(exit_grace_s=2.0), mps=monitor)
    runtime = HostRuntime(host.name, NvmlSource(nvml_for(card), clock, options), batches.append)
    entry = {"device_uuids": [card.uuid], "engine": "vllm"}
    runtime.apply_plan({
        "host": host.name, "collector": "nvml", "sample_interval_s": 1.0,
        "flush_interval_s": 5.0, "scrape_interval_s": 3600.0,
        "deployments": [
            {**entry, "deployment_id": str(chat_deployment.pk), "pids": [901],
             "process_name_pattern": "/srv/chat/", "log_path": str(log)},
            {**entry, "deployment_id": str(embedder_deployment.pk),
             "process_name_pattern": "/srv/embed/"},
        ],
    })  # fmt: skip

    def tick(seconds):
        for _ in range(seconds):
            monitor.refresh()
            clock.t += 1
            runtime.tick()
            runtime.publish_pending()

    tick(3)
    with log.open("a") as engine:
        engine.write(
            "(VllmWorker TP0 pid=901) ERROR 06-05 06:18:13 [x.py:1] torch.OutOfMemoryError: CUDA "
            "out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
            "of which 2.00 GiB is free. Of the allocated memory 58.00 GiB is allocated by "
            "PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.\n"
        )
    card.processes.remove(chat)
    tick(4)
    card.processes.append(FakeProcess(950, "/srv/chat/bin/python3", 5 * GIB, kind="mps"))
    (pipe_dir / "daemon.json").write_text(json.dumps({"servers": {"900": [902, 950]}}))
    tick(3)
    (pipe_dir / "daemon.json").write_text(json.dumps({"servers": {}}))
    card.processes.clear()
    tick(3)
    runtime.flush(clock.t)
    runtime.publish_pending()
    for batch in batches:
        ingest_batch(batch)

    events = {event.kind: event for event in Event.objects.filter(host=host)}
    assert set(events) == {"oom", "process_exit", "process_restart", "mps_server_down"}
    oom = events["oom"]
    assert oom.gpu == gpu and oom.deployment == chat_deployment
    assert oom.detail["source"] == "engine_log" and oom.snapshot["requested_bytes"] == 4 * GIB
    by_pid = {p["pid"]: p for p in oom.snapshot["processes"]}
    assert by_pid[901]["allocator"] == {"allocated_bytes": 58 * GIB,
                                        "reserved_bytes": int(59.5 * GIB)}  # fmt: skip
    assert oom.cause and oom.cause_explanation  # triaged from the snapshot
    assert events["process_exit"].detail["oom_evidence"] == ["engine_log"]
    restart = events["process_restart"]
    assert restart.deployment == chat_deployment
    assert (restart.detail["old_pids"], restart.detail["new_pids"]) == ([901], [950])
    down = events["mps_server_down"]
    assert {c["pid"] for c in down.detail["clients"]} == {902, 950}
    status = CollectorStatus.objects.get(host=host)
    assert status.mps_servers == []  # the daemon's last answer: no server left
    assert status.mps_seen_at is not None


def test_the_plan_carries_a_deployments_log_path_and_allocator_url_only_when_set():
    from inventory.collection import collection_plan

    host = HostFactory(collector=Host.Collector.NVML)
    gpu = GpuFactory(host=host, index=0)
    DeploymentFactory(host=host, gpus=[gpu], log_path="/var/log/vllm/chat.log",
                      allocator_url="http://127.0.0.1:9464/metrics")  # fmt: skip
    DeploymentFactory(host=host, gpus=[gpu])
    with_log, plain = sorted(collection_plan(host)["deployments"], key=lambda e: "log_path" in e)[
        ::-1
    ]
    assert with_log["log_path"] == "/var/log/vllm/chat.log"
    assert with_log["allocator_url"] == "http://127.0.0.1:9464/metrics"
    assert "log_path" not in plain and "allocator_url" not in plain


def test_an_admin_may_set_a_deployments_log_path_and_it_is_audited(admin_client):
    from console.core.models import AuditEntry

    gpu = GpuFactory(index=0)
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    response = admin_client.post(
        f"/admin/inventory/deployment/{deployment.pk}/change/",
        {
            "served_model": deployment.served_model_id,
            "host": deployment.host_id,
            "gpus": [gpu.pk],
            "isolation_mode": deployment.isolation_mode,
            "kv_reservation_bytes": deployment.kv_reservation_bytes,
            "kv_reservation_basis": deployment.kv_reservation_basis,
            "admission_policy": deployment.admission_policy,
            "status": deployment.status,
            "log_path": "journald:vllm-chat.service",
            "allocator_url": "http://127.0.0.1:9464/metrics",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    deployment.refresh_from_db()
    assert deployment.log_path == "journald:vllm-chat.service"
    assert AuditEntry.objects.filter(action="deployment.change").exists()


def _in_container(proc, host_pid: int, inner_pid: int, started: int, container: str | None):
    """A GPU process's /proc entry: its container's cgroup (None: the host's), its NSpid and
    start time, as inventory.telemetry.containers and allocator_scrape read them."""
    (proc / str(host_pid)).mkdir(parents=True)
    cgroup = f"0::/system.slice/docker-{container}.scope" if container else "0::/user.slice"
    nspid = f"{host_pid} {inner_pid}" if container else str(host_pid)
    (proc / str(host_pid) / "cgroup").write_text(cgroup + "\n")
    (proc / str(host_pid) / "status").write_text(f"Name:\tpython3\nNSpid:\t{nspid}\n")
    fields = " ".join(["S", *["0"] * 18, str(started), "0"])
    (proc / str(host_pid) / "stat").write_text(f"{host_pid} (python3) {fields}\n")


def test_a_containerised_vllm_without_the_plugin_or_its_folder_is_named_once_on_the_host_page(
    tmp_path, client_as
):
    """docs/deploy.md's "allocator exporter" row, when missing: a vLLM in a container whose
    processes leave no snapshot (no plugin in its image, or the folder not mounted) is a
    `scrape:allocator` fault NotPublished naming it, once, and only after the plugin had a
    minute; an engine that never publishes (Ollama), a vLLM that publishes, a vLLM on the host
    (its exporter is its allocator_url's) and one with an allocator_url are not named."""
    host = HostFactory(name="gpu-containers-01", collector=Host.Collector.NVML)
    processes = {
        pid: FakeProcess(pid, "python3", 10 * GIB) for pid in (4101, 4102, 4201, 4301, 4401, 4501)
    }
    card = h100_card(host.name, 0, list(processes.values()))
    gpu = GpuFactory(host=host, index=0, uuid=card.uuid, memory_total_bytes=card.total_bytes)
    proc, folder = tmp_path / "proc", tmp_path / "allocator"
    folder.mkdir()
    hexid = "{:064x}".format
    for host_pid, inner, container in (
        (4101, 7, hexid(1)), (4102, 8, hexid(1)),  # vLLM TP2, no plugin
        (4201, 7, hexid(2)),  # Ollama: never publishes
        (4301, 7, hexid(3)),  # vLLM with the plugin and the folder
        (4401, None, None),  # vLLM on the host
        (4501, 7, hexid(5)),  # vLLM with an allocator_url
    ):  # fmt: skip
        _in_container(proc, host_pid, inner or host_pid, 5000 + host_pid, container)
    deployments = {
        name: DeploymentFactory(host=host, gpus=[gpu], runtime_name=name,
                                served_model__name=name, served_model__engine=engine)
        for name, engine in (("vllm-llama", "vllm"), ("ollama-small", "ollama"),
                             ("vllm-ok", "vllm"), ("vllm-host", "vllm"), ("vllm-url", "vllm"))
    }  # fmt: skip
    pids = {"vllm-llama": [4101, 4102], "ollama-small": [4201], "vllm-ok": [4301],
            "vllm-host": [4401], "vllm-url": [4501]}  # fmt: skip
    engines = {"ollama-small": "ollama"}

    def publish_ok():  # the plugin's snapshot of vllm-ok, rewritten as it does every 5 s
        row = {"pid": 7, "device": 0, "largest_free_block_bytes": None,
               "memory_stats": {"reserved_bytes.all.current": 8 * GIB,
                                "allocated_bytes.all.current": 6 * GIB}}  # fmt: skip
        (folder / "7-9301.json").write_text(json.dumps({"ns_pid": 7, "rows": [row]}))

    clock = Clock()
    batches = []
    source = NvmlSource(nvml_for(card), clock, SignalOptions(proc=proc), allocator_dir=folder)
    runtime = HostRuntime(host.name, source, batches.append)
    runtime.apply_plan({
        "host": host.name, "collector": "nvml", "sample_interval_s": 1.0,
        "flush_interval_s": 10.0, "scrape_interval_s": 5.0,
        "deployments": [
            {"deployment_id": str(d.pk), "engine": engines.get(name, "vllm"), "model": name,
             "runtime_name": name, "device_uuids": [card.uuid], "pids": pids[name],
             **({"allocator_url": "http://127.0.0.1:1/memory_stats"}
                if name == "vllm-url" else {})}
            for name, d in deployments.items()
        ],
    })  # fmt: skip

    def faults_until(seconds):
        for _ in range(seconds):
            publish_ok()
            clock.t += 1
            runtime.tick()
        runtime.flush(clock.t)
        runtime.publish_pending()
        said = [f for b in batches for f in b["faults"] if f["error"] == "NotPublished"]
        batches_now = list(batches)
        batches.clear()
        return said, batches_now

    early, first = faults_until(55)
    assert early == [], "not before the plugin had its minute"
    (fault,), second = faults_until(20)
    assert fault["call"] == "scrape:allocator"
    assert fault["message"].startswith(
        f"allocator statistics missing for deployment vllm-llama (id {deployments['vllm-llama'].pk}"
    )
    assert "host pid(s) 4101, 4102" in fault["message"]
    assert "engine plugin is not installed" in fault["message"]
    assert "not mounted" in fault["message"] and "docs/deploy.md" in fault["message"]
    again, third = faults_until(60)
    assert again == [], "once, not every poll"
    by_pid = {row["pid"]: row for b in third for row in b["processes"]}
    assert by_pid[4301]["allocator"]["reserved_bytes"] == 8 * GIB  # the one that publishes
    for batch in first + second + third:
        ingest_batch(batch)
    text = client_as("oncall").get(f"/hosts/{host.name}/").content.decode()
    assert "<code>scrape:allocator</code> NotPublished" in text
    assert "allocator statistics missing for deployment vllm-llama" in text
