"""Admin edits of placements land in the audit trail with before and after."""

import pytest
from django.contrib.auth import get_user_model

from console.models import AuditEntry
from inventory.models import Deployment
from tests.factories import DeploymentFactory, GpuFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client):
    admin = get_user_model().objects.create_superuser("root", "root@example.org", "x")
    client.force_login(admin)
    return client


def test_moving_a_deployment_in_the_admin_is_audited(admin_client):
    gpu0 = GpuFactory(index=0)
    gpu1 = GpuFactory(index=1, host=gpu0.host)
    deployment = DeploymentFactory(host=gpu0.host, gpus=[gpu0])
    response = admin_client.post(
        f"/admin/inventory/deployment/{deployment.pk}/change/",
        {
            "served_model": deployment.served_model_id,
            "host": gpu0.host_id,
            "gpus": [gpu1.pk],
            "isolation_mode": "gpu_group",
            "kv_reservation_bytes": deployment.kv_reservation_bytes,
            "kv_reservation_basis": "p95",
            "admission_policy": "queue",
            "status": "active",
        },
    )
    assert response.status_code == 302, response.content
    entry = AuditEntry.objects.get(action="deployment.change")
    assert entry.actor_name == "root"
    assert entry.host == gpu0.host
    assert entry.before["gpus"] == [gpu0.pk]
    assert entry.after["gpus"] == [gpu1.pk]
    assert entry.changed_fields == ["gpus"]


def test_the_admin_refuses_cards_of_another_host(admin_client):
    here, there = GpuFactory(), GpuFactory()
    deployment = DeploymentFactory(host=here.host, gpus=[here])
    response = admin_client.post(
        f"/admin/inventory/deployment/{deployment.pk}/change/",
        {
            "served_model": deployment.served_model_id,
            "host": here.host_id,
            "gpus": [there.pk],
            "isolation_mode": "gpu_group",
            "kv_reservation_bytes": 0,
            "kv_reservation_basis": "none",
            "admission_policy": "queue",
            "status": "active",
        },
    )
    assert response.status_code == 200
    assert f"Not on {here.host.name}" in response.content.decode()
    assert list(Deployment.objects.get().gpus.all()) == [here]
    assert not AuditEntry.objects.exists()


def test_deleting_in_the_admin_keeps_the_before(admin_client):
    deployment = DeploymentFactory()
    admin_client.post(f"/admin/inventory/deployment/{deployment.pk}/delete/", {"post": "yes"})
    entry = AuditEntry.objects.get(action="deployment.delete")
    assert entry.after is None
    assert entry.before["id"] == deployment.pk
