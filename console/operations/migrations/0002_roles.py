"""Who may do what with host operations: everyone with a role sees them; on-call asks for
actions; approvers approve actions and reload plans, sign standing policies and clear a
card's refusal of new loads; managers read."""

import importlib

from django.db import migrations

roles = importlib.import_module("console.core.migrations.0002_roles")

VIEW = [
    "operations.view_hostaction",
    "operations.view_standingpolicy",
    "operations.view_degradationrun",
    "operations.view_mpsrecovery",
    "operations.view_defragplan",
    "operations.view_defragreload",
    "inventory.view_cardrefusal",
]
ASK = ["operations.add_hostaction"]
ROLE_PERMISSIONS = {
    "manager": VIEW,
    "oncall": [*VIEW, *ASK],
    "approver": [
        *VIEW,
        *ASK,
        "operations.approve_hostaction",
        "operations.sign_standingpolicy",
        "operations.approve_defragplan",
    ],
}


def grant(apps, schema_editor):
    roles.ensure_permissions(apps)
    roles.grant(apps, ROLE_PERMISSIONS)


class Migration(migrations.Migration):
    dependencies = [
        ("operations", "0001_host_operations"),
        ("inventory", "0017_card_refusal"),
        ("console", "0006_audit_actions_and_preferences"),
    ]

    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
