"""Every write lands in the audit trail with before, after and the change id of its action."""

import datetime as dt
import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from console.core.api_tokens.models import ApiToken
from console.core.auditing import Action
from console.core.auditing.changes import open_change, record
from console.core.models import AuditEntry
from console.core.roles import APPROVER, ONCALL
from inventory.models import Deployment, Event, Gpu, Host
from inventory.services import do_acknowledge_event
from tests.factories import (
    DeploymentFactory,
    GpuFactory,
    HostFactory,
    MigSliceFactory,
    UserFactory,
)

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


def inline_management(prefix: str, total: int, initial: int) -> dict:
    return {
        f"{prefix}-TOTAL_FORMS": total,
        f"{prefix}-INITIAL_FORMS": initial,
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }


def host_form(host_name: str, **extra) -> dict:
    return {"name": host_name, "address": host_name, "status": "active", "collector": "none",
            "labels": "{}", "description": "", **extra}  # fmt: skip


def card_form(prefix: str, index: int, **extra) -> dict:
    card = {"index": index, "uuid": f"GPU-{prefix}-{index}", "product_name": "H100",
            "memory_total_bytes": 80 * 2**30, "mig_mode": "disabled",
            "compute_mode": "default"}  # fmt: skip
    return {f"{prefix}-{key}": value for key, value in {**card, **extra}.items()}


def test_a_host_added_with_its_cards_is_one_change(admin_client):
    data = {
        **host_form("infer-09"),
        **inline_management("gpus", 2, 0),
        **card_form("gpus-0", 0),
        **card_form("gpus-1", 1),
    }
    response = admin_client.post("/admin/inventory/host/add/", data)
    assert response.status_code == 302, response.content.decode()
    host = Host.objects.get(name="infer-09")
    rows = AuditEntry.objects.filter(host=host)
    assert sorted(rows.values_list("action", "object_repr")) == sorted(
        [("admin.add", str(host)), *(("admin.add", str(gpu)) for gpu in host.gpus.all())]
    )
    assert rows.values("change_id").distinct().count() == 1
    assert {row.actor_name for row in rows} == {"root"}


def test_changing_and_deleting_inline_cards_is_one_change_with_befores(admin_client):
    host = HostFactory(name="infer-10", collector="none")
    kept = GpuFactory(host=host, index=0, product_name="H100")
    dropped = GpuFactory(host=host, index=1)
    data = {
        **host_form("infer-10", address=host.address, description="rack 4"),
        **inline_management("gpus", 2, 2),
        **card_form("gpus-0", 0, id=kept.pk, host=host.pk, uuid=kept.uuid, product_name="H200"),
        **card_form("gpus-1", 1, id=dropped.pk, host=host.pk, uuid=dropped.uuid, DELETE="on"),
    }
    response = admin_client.post(f"/admin/inventory/host/{host.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()
    rows = {
        (row.action, row.content_type.model, row.object_id): row
        for row in AuditEntry.objects.filter(host=host)
    }
    changed_card = rows["admin.change", "gpu", str(kept.pk)]
    assert changed_card.before["product_name"] == "H100"
    assert changed_card.after["product_name"] == "H200"
    assert rows["admin.delete", "gpu", str(dropped.pk)].before["uuid"] == dropped.uuid
    assert rows["admin.change", "host", str(host.pk)].changed_fields == ["description"]
    assert len({row.change_id for row in rows.values()}) == 1
    assert not Gpu.objects.filter(pk=dropped.pk).exists()


def _form_value(value):
    return "" if value is None else value


def test_a_mig_slice_added_on_its_card_is_one_change_with_the_card(admin_client):
    existing = MigSliceFactory()
    gpu = existing.gpu
    slice_fields = {"profile_name": "3g.71gb", "start_slot": 4, "size_slots": 4,
                    "memory_bytes": existing.memory_bytes, "uuid": "", "gpu_instance_id": "",
                    "compute_instance_id": ""}  # fmt: skip
    data = {
        "host": gpu.host_id, "index": gpu.index, "uuid": gpu.uuid,
        "product_name": gpu.product_name, "memory_total_bytes": gpu.memory_total_bytes,
        "mig_mode": gpu.mig_mode, "compute_mode": gpu.compute_mode,
        **inline_management("mig_slices", 2, 1),
        "mig_slices-0-id": existing.pk, "mig_slices-0-gpu": gpu.pk,
        **{f"mig_slices-0-{key}": _form_value(getattr(existing, key)) for key in slice_fields},
        "mig_slices-1-gpu": gpu.pk,
        **{f"mig_slices-1-{key}": value for key, value in slice_fields.items()},
    }  # fmt: skip
    response = admin_client.post(f"/admin/inventory/gpu/{gpu.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()
    rows = AuditEntry.objects.all()
    assert sorted(row.content_type.model for row in rows) == ["gpu", "migslice"]
    added = rows.get(content_type__model="migslice")
    assert (added.action, added.after["start_slot"], added.host) == ("admin.add", 4, gpu.host)
    assert rows.values("change_id").distinct().count() == 1


def test_setting_a_password_in_the_admin_is_audited_without_the_hash(admin_client):
    alice = UserFactory(username="alice")
    response = admin_client.post(
        f"/admin/auth/user/{alice.pk}/password/",
        {"password1": "a new long passphrase", "password2": "a new long passphrase",
         "usable_password": "true"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()
    entry = AuditEntry.objects.get(object_id=str(alice.pk))
    assert (entry.action, entry.actor_name, entry.before, entry.after) == (
        "admin.change", "root", None, None
    )  # fmt: skip


def test_a_host_with_cards_cannot_be_deleted_and_one_without_leaves_its_before(admin_client):
    # Cards are PROTECTed: a deletion never cascades past what the trail records.
    host = HostFactory(name="infer-11")
    GpuFactory(host=host)
    admin_client.post(f"/admin/inventory/host/{host.pk}/delete/", {"post": "yes"})
    assert Host.objects.filter(pk=host.pk).exists()
    assert not AuditEntry.objects.exists()
    empty = HostFactory(name="infer-12")
    response = admin_client.post(f"/admin/inventory/host/{empty.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert AuditEntry.objects.get(action="admin.delete").before["name"] == "infer-12"


def test_a_role_change_shows_on_the_audit_page_with_its_change_id(admin_client):
    alice = UserFactory(username="alice", roles=[ONCALL])
    response = admin_client.post(
        f"/admin/auth/user/{alice.pk}/change/",
        {
            "username": "alice",
            "is_active": "on",
            "groups": [Group.objects.get(name=APPROVER).pk],
            "last_login_0": "",
            "last_login_1": "",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    assert response.status_code == 302, response.content.decode()
    entry = AuditEntry.objects.get(action="admin.change", object_id=str(alice.pk))
    assert entry.before["groups"] == [ONCALL]
    assert entry.after["groups"] == [APPROVER]
    assert "password" not in entry.after
    page = admin_client.get(f"/audit/?change={entry.change_id}")
    assert list(page.context["page"]) == [entry]
    assert f"?change={entry.change_id}" in page.content.decode()


def test_a_token_made_in_the_admin_names_its_maker_but_never_its_key(admin_client):
    alice = UserFactory(username="alice")
    response = admin_client.post("/admin/console/apitoken/add/", {"user": alice.pk})
    assert response.status_code == 200, response.content.decode()
    key = response.context["key"]
    entry = AuditEntry.objects.get(action="token.create")
    assert (entry.actor_name, entry.object_repr) == ("root", "alice")
    assert entry.after["fingerprint"] == ApiToken.objects.get(user=alice).fingerprint
    assert key not in str(entry.after) + entry.object_id
    assert entry.change_id


def test_a_token_made_by_the_command_is_audited_as_the_system():
    alice = UserFactory(username="alice")
    out = io.StringIO()
    call_command("create_api_token", "alice", stdout=out, stderr=io.StringIO())
    entry = AuditEntry.objects.get(action="token.create")
    assert (entry.actor_name, entry.object_id) == ("system", str(alice.pk))
    assert out.getvalue().strip() not in str(entry.after)


def test_a_token_deleted_in_the_admin_is_audited(admin_client):
    alice = UserFactory(username="alice")
    admin_client.post("/admin/console/apitoken/add/", {"user": alice.pk})
    token = ApiToken.objects.get(user=alice)
    response = admin_client.post(f"/admin/console/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    entry = AuditEntry.objects.get(action="token.delete")
    assert (entry.actor_name, entry.before["fingerprint"]) == ("root", token.fingerprint)
    assert not ApiToken.objects.exists()


def test_periodic_task_edits_and_bulk_actions_are_audited(admin_client):
    every_minute = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    task = PeriodicTask.objects.create(name="nightly", task="x", interval=every_minute)
    response = admin_client.post(
        "/admin/django_celery_beat/periodictask/",
        {"action": "disable_tasks", "_selected_action": [task.pk], "index": 0},
    )
    assert response.status_code == 302, response.content.decode()
    entry = AuditEntry.objects.get(action="admin.change", object_id=str(task.pk))
    assert (entry.before["enabled"], entry.after["enabled"]) == (True, False)
    admin_client.post(f"/admin/django_celery_beat/periodictask/{task.pk}/delete/", {"post": "yes"})
    assert AuditEntry.objects.get(action="admin.delete").before["name"] == "nightly"


def test_an_unknown_action_is_refused():
    host = HostFactory()
    with pytest.raises(ValueError):
        record(actor=None, action="host.renamed", obj=host, before=None, after=None)
    entry = AuditEntry(actor_name="system", action="host.renamed", object_id="1",
                       object_repr="x", change_id="0" * 32)  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        entry.full_clean(exclude=["content_type"])
    assert "action" in refused.value.message_dict


def test_an_action_inside_an_open_change_joins_it(personas):
    event = Event.objects.create(host=HostFactory(), kind="oom", at=dt.datetime.now(dt.UTC),
                                 batch_id="0" * 32, position=0)  # fmt: skip
    with open_change(personas["oncall"]) as change:
        do_acknowledge_event(event, acting_user=personas["oncall"])
        record(actor=None, action=Action.ADMIN_CHANGE, obj=event, before=None, after=None)
    assert set(AuditEntry.objects.values_list("change_id", flat=True)) == {change.id}


def test_a_record_outside_any_change_is_a_change_of_its_own():
    host = HostFactory()
    for _ in range(2):
        record(actor=None, action=Action.ADMIN_CHANGE, obj=host, before=None, after=None)
    assert AuditEntry.objects.values("change_id").distinct().count() == 2


def test_an_action_refuses_to_run_inside_someone_elses_transaction(personas):
    event = Event.objects.create(host=HostFactory(), kind="oom", at=dt.datetime.now(dt.UTC),
                                 batch_id="0" * 32, position=0)  # fmt: skip
    with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
        do_acknowledge_event(event, acting_user=personas["oncall"])


def test_registering_a_host_and_seeding_the_demo_are_audited():
    call_command("register_host", "gpu-box-7", stdout=io.StringIO())
    registered = AuditEntry.objects.get(action="host.register")
    assert registered.host.name == "gpu-box-7"
    call_command("seed_demo", "--history-days", "0", stdout=io.StringIO())
    seeded = AuditEntry.objects.filter(action="demo.seed")
    assert {"admin", "oncall", "infer-01"} <= set(seeded.values_list("object_repr", flat=True))
    assert seeded.values("change_id").distinct().count() == 1
