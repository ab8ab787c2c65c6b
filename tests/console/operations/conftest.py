"""The card most operations tests start from."""

import time

import pytest

from inventory.demo import _create_host
from inventory.ingest.writer import ingest_batch
from inventory.models import ServedModel
from inventory.telemetry.simulator.operations_scenario import operations_host
from tests.batches import batch, card_row, process_row
from tests.factories import GIB, DeploymentFactory, GpuFactory, ServedModelFactory


@pytest.fixture
def card():
    """One 80 GiB card at 99%: two vLLM tenants' preallocated pools (a priority-1 model
    holding 40 GiB, a priority-3 one 20 GiB) and a job no deployment owns that took 19.2 of
    the 20 GiB they leave: the on-demand part is at 96%."""
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    important = DeploymentFactory(
        host=gpu.host, gpus=[gpu], runtime_name="chat",
        served_model=ServedModelFactory(name="chat-model", priority=1, engine="vllm"),
        kv_reservation_bytes=8 * GIB,
    )  # fmt: skip
    cheap = DeploymentFactory(
        host=gpu.host, gpus=[gpu], runtime_name="batch",
        served_model=ServedModelFactory(name="batch-model", priority=3, engine="vllm"),
        kv_reservation_bytes=12 * GIB,
    )  # fmt: skip
    now = time.time()
    used = int(79.2 * GIB)
    ingest_batch(
        batch(
            gpu.host,
            start=now - 10,
            end=now,
            cards=[card_row(gpu, used_max=used, used_last=used, total=80 * GIB)],
            processes=[
                process_row(gpu, 100, used_max=40 * GIB, used_last=40 * GIB, deployment=important),
                process_row(gpu, 200, used_max=20 * GIB, used_last=20 * GIB, deployment=cheap),
                process_row(gpu, 300, used_max=int(19.2 * GIB), used_last=int(19.2 * GIB),
                            name="python3 memtest.py"),
            ],
        )
    )  # fmt: skip
    return gpu, important, cheap


@pytest.fixture
def ops_host(settings):
    """The operations demo's host as the end-to-end tests collect it (on host.simulator)."""
    settings.COLLECTION_PLAN_INTERVAL_S = 2.0
    host = _create_host(operations_host())
    ServedModel.objects.filter(name="chat-70b-awq").update(priority=1)
    ServedModel.objects.filter(name="batch-8b").update(priority=3)
    return host
