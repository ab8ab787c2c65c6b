"""The role groups the data migration creates, and what each may do."""

import pytest
from django.contrib.auth.models import Group

from console.core.roles import roles_of

pytestmark = pytest.mark.django_db


def _perms(role):
    group = Group.objects.get(name=role)
    return {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}


def test_the_three_roles_exist():
    assert set(Group.objects.values_list("name", flat=True)) >= {"oncall", "approver", "manager"}


def test_managers_read_everything_and_change_nothing():
    perms = _perms("manager")
    assert perms, "manager has no permissions"
    assert all(p.split(".")[1].startswith("view_") for p in perms)
    assert {"inventory.view_host", "runbooks.view_runbooknote", "console.view_auditentry"} <= perms


def test_oncall_edit_runbooks():
    perms = _perms("oncall")
    assert {"runbooks.add_runbooknote", "runbooks.change_runbooknote"} <= perms
    assert "runbooks.delete_runbooknote" not in perms
    assert "inventory.change_deployment" not in perms


def test_approvers_can_do_what_oncall_can():
    assert _perms("oncall") <= _perms("approver")


def test_roles_of_describes_a_user(personas):
    assert roles_of(personas["approver"]) == ["approver"]
    assert roles_of(personas["outsider"]) == []


def test_a_superuser_is_described_as_admin(django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.org", "x")
    assert roles_of(root) == ["admin"]
