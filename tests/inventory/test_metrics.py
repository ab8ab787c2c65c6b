"""GET /metrics: derived figures in Prometheus' text format."""

import datetime as dt

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from inventory.models import Deployment
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory, ServedModelFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db


def test_prometheus_reads_fragmentation_headroom_kv_gap_and_ooms(client, personas):
    gpu = GpuFactory(host__name="infer-09", index=2, memory_total_bytes=80 * GIB)
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
    token = token_for(personas["manager"])
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    card = (("card", "2"), ("host", "infer-09"))
    assert samples[("gpu_console_card_fragmentation_index", card)] == pytest.approx(0.5)
    headroom = 80 * GIB - 479 * 1024**2 - 32 * GIB
    assert samples[("gpu_console_card_headroom_bytes", card)] == headroom
    labels = (("deployment", str(deployment.pk)), ("host", "infer-09"), ("model", "chat"))
    gap_key = ("gpu_console_kv_reservation_gap_bytes", labels)
    # 10 requests x 1000 tokens x 128 KiB x 1.2 - 1 GiB
    assert samples[gap_key] == pytest.approx(10 * 1000 * 131072 * 1.2 - GIB)
    assert samples[("gpu_console_ooms_24h", (("host", "infer-09"),))] == 0
