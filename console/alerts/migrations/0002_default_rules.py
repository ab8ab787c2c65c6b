"""Install the default alert rules (console.alerts.default_rules); existing slugs are left alone."""

from django.db import migrations

from console.alerts.default_rules import DEFAULT_RULES


def install(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    for slug, name, kind, severity, for_s, resolve_s, repeat_s, params, runbook in DEFAULT_RULES:
        AlertRule.objects.get_or_create(
            slug=slug,
            defaults={
                "name": name,
                "kind": kind,
                "severity": severity,
                "for_s": for_s,
                "resolve_after_s": resolve_s,
                "repeat_interval_s": repeat_s,
                "params": params,
                "runbook_slug": runbook,
            },
        )


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
