"""API tokens as digests. The keys of DRF's token table (rest_framework.authtoken, no longer
installed), where a console ran with it, move here as digests and leave that table: they keep
working, and no database holds them in clear any more."""

import hashlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DRF_TABLE = "authtoken_token"


def move_drf_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if DRF_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("console", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {DRF_TABLE}")
        rows = cursor.fetchall()
        for key, user_id, created in rows:
            digest = hashlib.sha256(key.encode()).hexdigest()
            token = ApiToken.objects.create(user_id=user_id, digest=digest)
            ApiToken.objects.filter(pk=token.pk).update(created=created)
        cursor.execute(f"DELETE FROM {DRF_TABLE}")


def forget_drf_token_types(apps, schema_editor):
    """The content types and permissions of the app no longer installed (what Django's
    remove_stale_contenttypes would do), unless an audit row names one: history keeps it."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    AuditEntry = apps.get_model("console", "AuditEntry")
    stale = ContentType.objects.filter(app_label="authtoken")
    if not AuditEntry.objects.filter(content_type__in=stale).exists():
        stale.delete()  # their permissions go with them


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0007_audit_action_model_priority"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("digest", models.CharField(editable=False, max_length=64, unique=True,
                                            verbose_name="digest")),
                ("created", models.DateTimeField(auto_now_add=True, verbose_name="created")),
                ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                           related_name="api_tokens", to=settings.AUTH_USER_MODEL,
                                           verbose_name="user")),
            ],
            options={"verbose_name": "API token", "verbose_name_plural": "API tokens"},
        ),
        # Irreversible in effect: the keys are gone; going back leaves DRF's table empty.
        migrations.RunPython(move_drf_tokens, migrations.RunPython.noop),
        migrations.RunPython(forget_drf_token_types, migrations.RunPython.noop),
    ]  # fmt: skip
