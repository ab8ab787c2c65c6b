"""Everyone with a role sees dead letters; on-call and approvers replay or discard them."""

import importlib

from django.db import migrations

roles = importlib.import_module("console.core.migrations.0002_roles")

VIEW = ["inventory.view_deadletter"]
ROLE_PERMISSIONS = {
    "manager": VIEW,
    "oncall": [*VIEW, "inventory.replay_deadletter"],
    "approver": [*VIEW, "inventory.replay_deadletter"],
}


def grant(apps, schema_editor):
    roles.ensure_permissions(apps)
    roles.grant(apps, ROLE_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [("inventory", "0009_dead_letters"), ("console", "0003_acknowledge_events")]

    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
