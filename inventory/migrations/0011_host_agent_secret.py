"""Every host gets a secret of its own to sign its batches with (one each, not one shared)."""

import secrets

from django.db import migrations, models

import inventory.models.fleet


def issue_secrets(apps, schema_editor):
    Host = apps.get_model("inventory", "Host")
    for host in Host.objects.filter(agent_secret=""):
        host.agent_secret = secrets.token_urlsafe(32)
        host.save(update_fields=["agent_secret"])


class Migration(migrations.Migration):
    dependencies = [("inventory", "0010_dead_letter_roles")]

    operations = [
        migrations.AddField(
            model_name="host",
            name="agent_secret",
            field=models.CharField(default="", editable=False, max_length=64),
            preserve_default=False,
        ),
        migrations.RunPython(issue_secrets, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="host",
            name="agent_secret",
            field=models.CharField(
                default=inventory.models.fleet.new_agent_secret,
                editable=False,
                help_text="Signs this host's telemetry batches (HMAC-SHA256); its agent reads "
                "it from AGENT_SECRET_FILE. Issued at registration; manage.py host_secret "
                "shows or rotates it.",
                max_length=64,
            ),
        ),
    ]
