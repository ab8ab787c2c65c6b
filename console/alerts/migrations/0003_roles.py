"""Everyone with a role reads alerts; on-call and approvers acknowledge and silence them;
approvers edit the rules."""

import importlib

from django.db import migrations

roles = importlib.import_module("console.core.migrations.0002_roles")

VIEW = [
    "alerts.view_alertrule",
    "alerts.view_alert",
    "alerts.view_silence",
    "alerts.view_notification",
]
ACT = ["alerts.acknowledge_alert", "alerts.add_silence", "alerts.change_silence"]
ROLE_PERMISSIONS = {
    "manager": VIEW,
    "oncall": [*VIEW, *ACT],
    "approver": [*VIEW, *ACT, "alerts.change_alertrule"],
}


def grant(apps, schema_editor):
    roles.ensure_permissions(apps)
    roles.grant(apps, ROLE_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [("alerts", "0002_default_rules"), ("console", "0002_roles")]

    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
