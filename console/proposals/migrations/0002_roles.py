"""Who may do what with proposals: on-call and approvers propose and apply; approvers alone
decide (never on their own, which the workflow enforces); managers read."""

import importlib

from django.db import migrations

roles = importlib.import_module("console.core.migrations.0002_roles")

PROPOSE = ["proposals.view_proposal", "proposals.add_proposal", "proposals.change_proposal"]

ROLE_PERMISSIONS = {
    "manager": ["proposals.view_proposal"],
    "oncall": [*PROPOSE, "proposals.apply_proposal"],
    "approver": [*PROPOSE, "proposals.apply_proposal", "proposals.approve_proposal"],
}


def grant(apps, schema_editor):
    roles.ensure_permissions(apps)
    roles.grant(apps, ROLE_PERMISSIONS)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, names in ROLE_PERMISSIONS.items():
        codenames = [name.split(".")[1] for name in names]
        for group in Group.objects.filter(name=role):
            group.permissions.remove(
                *Permission.objects.filter(
                    content_type__app_label="proposals", codename__in=codenames
                )
            )


class Migration(migrations.Migration):
    dependencies = [("proposals", "0001_initial"), ("console", "0003_acknowledge_events")]

    operations = [migrations.RunPython(grant, revoke)]
