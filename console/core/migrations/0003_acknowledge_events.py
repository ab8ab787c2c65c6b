"""On-call and approvers acknowledge events; everyone with a role reads telemetry."""

import importlib

from django.db import migrations

roles = importlib.import_module("console.core.migrations.0002_roles")

VIEW_TELEMETRY = [
    "inventory.view_event",
    "inventory.view_collectorstatus",
    "inventory.view_collectorfault",
]

ROLE_PERMISSIONS = {
    "manager": VIEW_TELEMETRY,
    "oncall": [*VIEW_TELEMETRY, "inventory.acknowledge_event"],
    "approver": [*VIEW_TELEMETRY, "inventory.acknowledge_event"],
}


def grant(apps, schema_editor):
    roles.ensure_permissions(apps)
    roles.grant(apps, ROLE_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [("console", "0002_roles"), ("inventory", "0003_timeseries_tables")]

    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
