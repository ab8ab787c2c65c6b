"""End to end: beat, a simulated host's agent, the broker, an ingest worker and PostgreSQL.

Real processes on a real broker (CELERY_BROKER_URL: Redis in CI; otherwise the folder broker)
write into the test database; the test reads what landed.
"""

import json
import shutil
from pathlib import Path

import pytest

from inventory.models import CardSample, CollectorStatus, Host, PlanDelivery, ProcessSample
from tests.processes import (
    Processes,
    database_url_for_processes,
    demo_host_signed,
    simulator_secrets,
    wait_for,
)

REAL_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "nvml-h200"
MIB = 1024**2

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def pipeline(settings, tmp_path, isolated_broker):
    settings.AGENT_FLUSH_INTERVAL_S = 2.0
    settings.COLLECTION_PLAN_INTERVAL_S = 2.0
    isolated_broker.purge("host.simulator")
    env = {"DATABASE_URL": database_url_for_processes(), **isolated_broker.env}
    processes = Processes(env, tmp_path)
    processes.celery_worker("central", "celery")
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    # It signs as a real agent does, with the secrets of the hosts the test registers.
    secrets = simulator_secrets(tmp_path, ["infer-01", "mps-l40s"])
    processes.agent("simulator", "host.simulator", {"AGENT_SOURCE": "simulator", **secrets})
    processes.beat(tmp_path)
    yield processes
    processes.stop()


def _logs(processes):
    return lambda: "\n".join(
        f"--- {name} ---\n{processes.log(name)[-3000:]}"
        for name in ("central", "ingest", "simulator", "beat")
    )


def test_a_simulated_host_lands_in_postgres_with_its_interval_peaks(pipeline):
    host = demo_host_signed("infer-01")
    wait_for(
        lambda: CardSample.objects.filter(gpu__host=host).values("ts").distinct().count() >= 2,
        timeout=150,
        what="two intervals of card samples from infer-01",
        logs=_logs(pipeline),
    )
    cards = CardSample.objects.filter(gpu__host=host)
    assert {sample.gpu.index for sample in cards} == set(range(8))
    assert all(sample.used_max >= sample.used_last for sample in cards)
    assert all(sample.samples >= 1 for sample in cards)
    processes = ProcessSample.objects.filter(gpu__host=host)
    assert processes.exists()
    deployments = set(host.deployments.values_list("pk", flat=True))
    assert set(processes.values_list("deployment_id", flat=True)) <= deployments
    assert processes.filter(deployment_id__in=deployments).exists()
    assert all(row.used_max >= row.used_last for row in processes if row.used_max is not None)
    status = CollectorStatus.objects.get(host=host)
    assert status.batches >= 2

    # A host added while everything runs is collected without a restart.
    later = demo_host_signed("mps-l40s")
    wait_for(
        lambda: CardSample.objects.filter(gpu__host=later).exists(),
        timeout=90,
        what="card samples from mps-l40s, added at run time",
        logs=_logs(pipeline),
    )
    assert Host.objects.get(name="mps-l40s").collector_status.batches >= 1


def test_what_a_host_agent_published_on_an_h200_is_written_by_the_ingest_worker(tmp_path):
    """The messages of the agent process on a real H200 (docs/gpu-check.md, check 3): a Celery
    worker over pynvml, with no database, published them to a folder broker. The ingest worker
    process takes them from that folder into PostgreSQL."""
    shutil.unpack_archive(REAL_RUN / "agent-broker.tar.gz", tmp_path / "broker")
    (tmp_path / "broker" / "control").mkdir()
    report = json.loads((REAL_RUN / "gpu-check.json").read_text())["agent_process"]
    host = Host.objects.create(name="vm", collector=Host.Collector.NVML)  # the machine's name
    processes = Processes(
        {
            "DATABASE_URL": database_url_for_processes(),
            "CELERY_BROKER_URL": "filesystem://",
            "CELERY_FILESYSTEM_BROKER_DIR": str(tmp_path / "broker"),
            # The run was on 2026-11-30, before agents signed their batches; ingest refuses
            # batches older than raw retention, and unsigned ones.
            "TELEMETRY_RAW_RETENTION_DAYS": "36500",
            "INGEST_REQUIRE_SIGNATURE": "false",
            # The queue that run published to, whatever this test run's own is.
            "INGEST_QUEUE_NAME": "ingest",
        },
        tmp_path,
    )
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    try:
        wait_for(
            lambda: CollectorStatus.objects.filter(host=host, batches=report["batches"]).exists(),
            timeout=60,
            what=f"the {report['batches']} batches of the H200 run",
            logs=lambda: processes.log("ingest")[-3000:],
        )
    finally:
        processes.stop()
    gpu = host.gpus.get()
    assert (gpu.product_name, gpu.memory_total_bytes) == ("NVIDIA H200", 143771 * MIB)
    series = ProcessSample.objects.filter(gpu=gpu, pid=report["pid"]).order_by("ts")
    assert [(row.used_max // MIB, row.used_last // MIB) for row in series] == [
        (1542, 1542),
        (5638, 1542),
        (1542, 1542),
        (1542, 1542),
        (1542, 1542),
    ]
    assert not list((tmp_path / "broker" / "queue").glob("*.msg")), "every message acknowledged"


def test_a_simulator_agent_started_after_the_plans_expired_asks_for_them(
    settings, tmp_path, isolated_broker
):
    """No beat runs: the plans sent at registration expired on the broker (nothing waits on
    the shared queue) and the agent kept none. At start it asks for the hosts it simulates,
    and the console's worker answers within seconds, not after the hour's refresh."""
    settings.AGENT_FLUSH_INTERVAL_S = 2.0
    isolated_broker.purge("host.simulator")
    host = demo_host_signed("infer-01")
    env = {"DATABASE_URL": database_url_for_processes(), **isolated_broker.env}
    processes = Processes(env, tmp_path)
    try:
        processes.celery_worker("central", "celery")
        processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
        secrets = simulator_secrets(tmp_path, ["infer-01"])
        processes.agent("simulator", "host.simulator", {"AGENT_SOURCE": "simulator", **secrets})
        wait_for(
            lambda: CardSample.objects.filter(gpu__host=host).exists(),
            timeout=60,
            what="card samples from infer-01 with no beat to send its plan",
            logs=lambda: "\n".join(
                f"--- {name} ---\n{processes.log(name)[-3000:]}"
                for name in ("central", "ingest", "simulator")
            ),
        )
        assert PlanDelivery.objects.get(host=host).digest
    finally:
        processes.stop()
