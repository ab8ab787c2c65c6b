"""Create the oncall, approver and manager groups with their permissions."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

VIEW_EVERYTHING = [
    "inventory.view_host",
    "inventory.view_gpu",
    "inventory.view_migslice",
    "inventory.view_servedmodel",
    "inventory.view_deployment",
    "runbooks.view_runbooknote",
    "runbooks.view_runbookrevision",
    "console.view_auditentry",
]
EDIT_RUNBOOKS = ["runbooks.add_runbooknote", "runbooks.change_runbooknote"]

ROLE_PERMISSIONS = {
    "manager": VIEW_EVERYTHING,
    "oncall": VIEW_EVERYTHING + EDIT_RUNBOOKS,
    "approver": VIEW_EVERYTHING + EDIT_RUNBOOKS,
}


def ensure_permissions(apps):
    # Permissions are normally created after all migrations have run; a data migration that
    # assigns them has to create them first.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None


def grant(apps, role_permissions):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, names in role_permissions.items():
        group, _ = Group.objects.get_or_create(name=role)
        for name in names:
            app_label, codename = name.split(".")
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )


def create_roles(apps, schema_editor):
    ensure_permissions(apps)
    grant(apps, ROLE_PERMISSIONS)


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("console", "0001_initial"),
        ("inventory", "0001_initial"),
        ("runbooks", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
