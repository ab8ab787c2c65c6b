"""Inventory's own state changes: each one change, audited."""

import datetime as dt

import pytest

from console.core.auditing.changes import open_change
from console.core.models import AuditEntry
from inventory.services import do_register_runtime, do_set_model_priority
from tests.factories import DeploymentFactory, ServedModelFactory

pytestmark = pytest.mark.django_db


def test_registering_a_runtime_is_one_audited_change(personas):
    deployment = DeploymentFactory(runtime_name="", endpoint_url="")
    registered = do_register_runtime(
        deployment,
        acting_user=personas["oncall"],
        runtime_name="vllm-chat-g0",
        endpoint_url="http://10.0.0.7:8000",
    )
    deployment.refresh_from_db()
    assert (deployment.runtime_name, deployment.endpoint_url) == (
        "vllm-chat-g0",
        "http://10.0.0.7:8000",
    )
    assert registered.runtime_name == "vllm-chat-g0"
    entry = AuditEntry.objects.get(action="deployment.change", object_id=str(deployment.pk))
    assert entry.actor_name == "oncall" and entry.host == deployment.host
    assert sorted(entry.changed_fields) == ["endpoint_url", "runtime_name"]
    assert (entry.before["runtime_name"], entry.after["runtime_name"]) == ("", "vllm-chat-g0")
    assert entry.comment == "registered with the host agent"


def test_registering_inside_an_open_change_joins_it_and_its_moment(personas):
    # The demo registers each card group's engine in the change that applied its proposal.
    deployment = DeploymentFactory()
    then = dt.datetime(2025, 1, 2, 3, 4, tzinfo=dt.UTC)
    with open_change(personas["oncall"], at=then) as change:
        do_register_runtime(deployment, acting_user=personas["oncall"], runtime_name="g1",
                            endpoint_url="")  # fmt: skip
    entry = AuditEntry.objects.get(action="deployment.change")
    assert entry.change_id == change.id and entry.at == then


def test_setting_a_models_priority_is_one_audited_change_and_no_row_when_unchanged(personas):
    model = ServedModelFactory(priority=2)
    do_set_model_priority(model, acting_user=personas["approver"], priority=4, comment="batch")
    model.refresh_from_db()
    assert model.priority == 4
    entry = AuditEntry.objects.get(action="served_model.priority", object_id=str(model.pk))
    assert (entry.actor_name, entry.host, entry.comment) == ("approver", None, "batch")
    assert (entry.before["priority"], entry.after["priority"]) == (2, 4)
    assert entry.changed_fields == ["priority"]
    # Setting what is already there changes nothing, so nothing enters the trail.
    do_set_model_priority(model, acting_user=personas["approver"], priority=4)
    assert AuditEntry.objects.filter(action="served_model.priority").count() == 1
