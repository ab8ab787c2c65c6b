"""manage.py loadtest: a combined test of a host's deployments, printed."""

import json
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from inventory.models import Deployment
from inventory.telemetry.simulator.endpoints import Answer, EndpointServer, FixedBehaviour
from tests.factories import DeploymentFactory, GpuFactory


@pytest.fixture
def endpoints():
    behaviour = FixedBehaviour(
        {"h/fast": Answer(0.002, 0.01, 3), "h/broken": Answer(0.002, 0.01, 3, mode="garbage")}
    )
    server = EndpointServer(behaviour)
    port = server.start_in_thread()
    return f"http://127.0.0.1:{port}/h"


def _deployment(gpu, url, api=Deployment.EndpointApi.COMPLETIONS):
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    deployment.endpoint_url, deployment.endpoint_api = url, api
    deployment.save()
    return deployment


@pytest.mark.django_db
def test_a_host_is_tested_and_printed_with_its_figures(settings, endpoints):
    settings.LOADTEST_FLUSH_WAIT_S = 0
    gpu = GpuFactory()
    first = _deployment(gpu, f"{endpoints}/fast")
    second = _deployment(gpu, f"{endpoints}/fast", Deployment.EndpointApi.CHAT)
    out = StringIO()
    call_command(
        "loadtest", "--host", gpu.host.name, "--duration", "1", "--ramp", "0.5",
        "--rate", f"{first.pk}=20", "--rate", f"{second.pk}=10", "--json", stdout=out,
    )  # fmt: skip
    report = json.loads(out.getvalue())
    assert report["status"] == "done"
    assert {m["model"] for m in report["models"]} == {
        first.served_model.name,
        second.served_model.name,
    }
    assert all(m["failed"] == 0 and m["e2e_ms"]["p99"] for m in report["models"])
    # No agent sent telemetry of the window: said, never made up.
    assert report["telemetry_flushed"] is False
    assert report["cards"] == [
        {"card": str(gpu), "peak_bytes": None, "bound_bytes": report["cards"][0]["bound_bytes"]}
    ]


@pytest.mark.django_db
def test_a_bad_endpoint_fails_the_run_with_its_errors_and_no_rate_is_refused(settings, endpoints):
    settings.LOADTEST_FLUSH_WAIT_S = 0
    settings.LOADTEST_REQUEST_TIMEOUT_S = 2
    gpu = GpuFactory()
    broken = _deployment(gpu, f"{endpoints}/broken")
    with pytest.raises(CommandError, match="the run failed: endpoint_errors"):
        call_command(
            "loadtest", "--host", gpu.host.name, "--duration", "1", "--ramp", "0.5",
            "--rate", f"{broken.pk}=20", stdout=StringIO(),
        )  # fmt: skip
    with pytest.raises(CommandError, match="has no busy-hour rate"):
        call_command("loadtest", "--host", gpu.host.name, "--duration", "1", stdout=StringIO())


@pytest.mark.django_db
def test_the_start_form_refuses_bad_figures_with_a_400_and_no_endpoint_with_its_reason(
    client_as, personas
):
    from tests.console.proposals.support import create_proposal

    gpu = GpuFactory()
    DeploymentFactory(host=gpu.host, gpus=[gpu])
    proposal = create_proposal(personas["oncall"], host=gpu.host, gpus=[gpu])
    client = client_as("oncall")
    url = f"/proposals/{proposal.pk}/load-tests/run/"
    refused = client.post(url, {"ramp_s": "-1", "hold_s": "x", "rate_scale": "1"})
    assert refused.status_code == 400
    assert b"load-test-form-errors" in refused.content
    answer = client.post(url, {"ramp_s": 1, "hold_s": 5, "rate_scale": 1}, follow=True)
    assert "has no inference endpoint to drive" in answer.content.decode()
    assert not proposal.load_tests.exists()


@pytest.mark.django_db
def test_a_host_minutes_old_is_tested_at_its_live_traffic_and_says_so(settings, endpoints):
    # No minute rolled up yet, no busy hour: the requests its engines counted in the last
    # quarter hour stand in (the demo's host, minutes after `make run`, had no rate at all).
    from inventory.ingest.writer import ingest_batches
    from tests.batches import batch, engine_row

    settings.LOADTEST_FLUSH_WAIT_S = 0
    gpu = GpuFactory()
    served = _deployment(gpu, f"{endpoints}/fast")
    now = time.time()
    counted = {"latency": {"e2e": {"count": 200.0, "window_s": 10.0, "p99_s": 0.05}}}
    engines = [engine_row(served, running=2, p99_s=0.05) | counted]
    ingest_batches(
        [
            batch(gpu.host, start=now - 20 + 10 * i, end=now - 10 + 10 * i, seq=i + 1,
                  engines=engines)
            for i in range(2)
        ]
    )  # fmt: skip
    out = StringIO()
    call_command(
        "loadtest", "--host", gpu.host.name, "--duration", "1", "--ramp", "0.5", stdout=out
    )
    printed = out.getvalue()
    assert f"{served.served_model.name} #{served.pk}: 20 requests/s offered" in printed
    assert "live traffic (last 15 min): no engine history yet" in printed
