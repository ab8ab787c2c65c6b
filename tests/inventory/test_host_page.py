"""The host page and its JSON: ledger, history, analyses, MPS blast radius, OOM timeline."""

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inventory.models import CollectorFault, Deployment, Event
from tests.batches import GIB, write_history
from tests.factories import DeploymentFactory, GpuFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def mps_host():
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    tenants = [
        DeploymentFactory(
            host=gpu.host,
            gpus=[gpu],
            isolation_mode=Deployment.Isolation.MPS,
            mps_active_thread_percentage=pct,
            served_model__name=name,
        )
        for name, pct in (("small-chat", 30), ("embedder", 70))
    ]
    write_history(gpu.host, [(gpu, d) for d in tenants],
                  start=(timezone.now() - dt.timedelta(minutes=90)).timestamp(), minutes=90,
                  demand=lambda m, i: (20 + i) * GIB, running=lambda m, i: 5.0,
                  p99=lambda m, i: 0.2)  # fmt: skip
    Event.objects.create(host=gpu.host, gpu=gpu, kind=Event.Kind.MPS_SERVER_DOWN,
                         at=timezone.now() - dt.timedelta(hours=1),
                         batch_id="00000000-0000-4000-8000-00000000000a", position=0)  # fmt: skip
    Event.objects.create(host=gpu.host, gpu=gpu, kind=Event.Kind.OOM, cause="true_peak",
                         cause_explanation="needed 2.0 GiB; card free 0.4 GiB: true peak",
                         at=timezone.now() - dt.timedelta(hours=2),
                         batch_id="00000000-0000-4000-8000-00000000000b", position=0)  # fmt: skip
    return gpu.host


def test_the_host_page_shows_ledger_data_mps_groups_and_ooms(client_as, mps_host):
    response = client_as("oncall").get(f"/hosts/{mps_host.name}/")
    assert response.status_code == 200
    ledger = response.context["ledger_data"]
    (card,) = ledger
    assert sum(line["bytes"] for line in card["lines"]) == card["total_bytes"]
    assert {line["deployment"] for line in card["lines"]} >= {"small-chat", "embedder"}
    (group,) = response.context["mps_groups"]
    assert sorted(group.models) == ["embedder", "small-chat"]
    assert group.thread_percentages == {"small-chat": 30, "embedder": 70}
    assert group.last_crash is not None
    page = response.content.decode()
    assert "die together" in page
    assert "true_peak" in page and "needed 2.0 GiB" in page
    assert 'id="ledger-data"' in page


def test_history_json_for_each_window(client_as, mps_host):
    client = client_as("manager")
    for window in ("1h", "24h", "7d", "30d"):
        data = client.get(f"/hosts/{mps_host.name}/charts/", {"window": window}).json()
        assert data["window"] == window
        assert data["cards"] == ["card 0"]
        assert any(v is not None for v in data["used_pct"][0]), window
        assert {line["label"] for line in data["deployments"]} == {
            "small-chat on card 0",
            "embedder on card 0",
        }
    bad = client.get(f"/hosts/{mps_host.name}/charts/", {"window": "2y"})
    assert bad.status_code == 400
    assert "one of 1h, 24h, 7d, 30d" in bad.json()["window"]


def test_a_30_day_heatmap_stays_small(client_as, mps_host):
    response = client_as("manager").get(f"/hosts/{mps_host.name}/charts/", {"window": "30d"})
    assert len(response.content) < 500_000
    assert response.json()["step_s"] == 6 * 3600


def test_the_analysis_fragment_has_kv_advice_and_copeaks(client_as, mps_host):
    response = client_as("approver").get(f"/hosts/{mps_host.name}/analysis/")
    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="kv-advice"' in page and 'id="copeaks"' in page and 'id="interference"' in page
    assert len(response.context["copeaks"]) == 1


def test_the_ledger_api_at_a_moment(client_as, mps_host):
    client = client_as("manager")
    now = client.get(f"/api/hosts/{mps_host.name}/ledger/").json()
    (card,) = now
    assert card["status"] in {"green", "amber", "red"}
    assert sum(line["bytes"] for line in card["lines"]) == card["total_bytes"]
    assert {line["basis"] for line in card["lines"]} == {"measured", "estimated"}
    past = client.get(
        f"/api/hosts/{mps_host.name}/ledger/",
        {"at": (timezone.now() - dt.timedelta(days=3)).isoformat()},
    ).json()
    assert past[0]["sampled_at"] is None  # nothing collected then: estimates only
    future = client.get(
        f"/api/hosts/{mps_host.name}/ledger/",
        {"at": (timezone.now() + dt.timedelta(days=1)).isoformat()},
    )
    assert future.status_code == 400
    assert "future" in str(future.json()["at"])


def test_the_mps_groups_follow_the_live_daemon_state_across_every_card_it_spans(
    client_as, mps_host
):
    from inventory.models import CollectorStatus

    gpu0 = mps_host.gpus.get(index=0)
    gpu1 = GpuFactory(host=mps_host, index=1, memory_total_bytes=80 * GIB)
    chat, embedder = (
        Deployment.objects.get(served_model__name=name) for name in ("small-chat", "embedder")
    )
    CollectorStatus.objects.update_or_create(
        host=mps_host,
        defaults={
            "mps_seen_at": timezone.now(),
            "mps_servers": [
                {
                    "server_pid": 900,
                    "card_uuids": [gpu0.uuid, gpu1.uuid],
                    "clients": [
                        {"pid": 901, "deployment_id": str(chat.pk)},
                        {"pid": 902, "deployment_id": str(embedder.pk)},
                        {"pid": 903, "deployment_id": None},
                    ],
                }
            ],
        },
    )
    response = client_as("oncall").get(f"/hosts/{mps_host.name}/")
    (group,) = response.context["mps_groups"]
    assert group.live and group.server_pid == 900
    assert group.card == f"{gpu0} + {gpu1}"
    assert sorted(group.models) == ["embedder", "small-chat", "unmapped client"]
    assert group.last_crash is not None
    assert "MPS server PID 900" in response.content.decode()
    assert not group.refusing_clients and "refusing new clients" not in response.content.decode()
    # The daemon of this GPU says its server took a fatal fault: it refuses new clients.
    status = CollectorStatus.objects.get(host=mps_host)
    status.mps_servers[0] |= {"status": "FAULT", "pipe_dir": "/run/nvidia-mps-0"}
    status.save()
    page = client_as("oncall").get(f"/hosts/{mps_host.name}/")
    (group,) = page.context["mps_groups"]
    assert group.refusing_clients and group.pipe_dir == "/run/nvidia-mps-0"
    assert "refusing new clients" in page.content.decode()
    assert "/run/nvidia-mps-0" in page.content.decode()
    CollectorStatus.objects.filter(host=mps_host).update(
        mps_seen_at=timezone.now() - dt.timedelta(hours=1)
    )
    (declared,) = client_as("oncall").get(f"/hosts/{mps_host.name}/").context["mps_groups"]
    assert not declared.live and sorted(declared.models) == ["embedder", "small-chat"]


def test_the_page_names_the_role_and_the_fragment_asks_nothing_for_a_navigation_it_lacks(
    mps_host, client_as
):
    client = client_as("manager")
    page = client.get(f"/hosts/{mps_host.name}/").content.decode()
    assert '<span class="role role-manager">' in page
    with CaptureQueriesContext(connection) as captured:
        client.get(f"/hosts/{mps_host.name}/analysis/")
    asked = " ".join(q["sql"] for q in captured.captured_queries)
    assert '"auth_group"."name"' not in asked  # the roles of the header
    assert '"alerts_alert"' not in asked  # the firing-alert badge


def test_a_missing_signal_is_named_on_the_host_page_with_what_to_grant(client_as):
    """docs/deploy.md's "when missing": the fault's call, error and its message, which says
    what to grant, never the call alone."""
    gpu = GpuFactory(index=1)
    now, BATCH = timezone.now(), "00000000-0000-4000-8000-0000000000f1"
    for card, call, error, message in (
        (None, "kernel_log", "Unreadable", "kernel log unreadable: grant CAP_SYSLOG (for "
         "/dev/kmsg under kernel.dmesg_restrict=1) or the systemd-journal group (for "
         "journalctl -k); docs/deploy.md, signals and privileges"),
        (gpu, "nvmlDeviceRegisterEvents", "NVMLError_NotSupported", "Not Supported: no Xid "
         "events from NVML for this card; only the kernel log's arrive"),
    ):  # fmt: skip
        CollectorFault.objects.create(
            host=gpu.host, gpu=card, card_index=card and card.index, call=call, error=error,
            message=message, first_at=now, last_at=now, batch_id=BATCH,
        )  # fmt: skip
    text = client_as("oncall").get(f"/hosts/{gpu.host.name}/").content.decode()
    assert "<code>kernel_log</code> Unreadable" in text
    assert "kernel log unreadable: grant CAP_SYSLOG" in text and "systemd-journal group" in text
    assert "card 1 <code>nvmlDeviceRegisterEvents</code> NVMLError_NotSupported" in text
    assert "only the kernel log&#x27;s arrive" in text
