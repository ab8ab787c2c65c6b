import uuid

import django.utils.timezone
from django.db import migrations, models

ACTIONS = [
    ("proposal.create", "proposal created"),
    ("proposal.edit", "proposal edited"),
    ("proposal.load_test", "load test attached"),
    ("proposal.submit", "proposal submitted"),
    ("proposal.start_checks", "gate checks started"),
    ("proposal.checks_passed", "gate checks passed"),
    ("proposal.checks_failed", "gate checks failed"),
    ("proposal.approve", "proposal approved"),
    ("proposal.reject", "proposal rejected"),
    ("proposal.request_changes", "changes requested"),
    ("proposal.apply", "proposal applied"),
    ("proposal.verify", "proposal verified"),
    ("proposal.roll_back", "proposal rolled back"),
    ("load_test.delete", "load test deleted"),
    ("deployment.create", "deployment created"),
    ("deployment.move", "deployment moved"),
    ("deployment.resize", "deployment resized"),
    ("deployment.stop", "deployment stopped"),
    ("deployment.roll_back", "deployment rolled back"),
    ("deployment.change", "deployment changed"),
    ("deployment.delete", "deployment deleted"),
    ("event.acknowledge", "event acknowledged"),
    ("runbook.create", "runbook note created"),
    ("runbook.update", "runbook note updated"),
    ("gpu.discover", "card discovered"),
    ("dead_letter.replay", "dead letter replayed"),
    ("dead_letter.discard", "dead letter discarded"),
    ("host.register", "host registered"),
    ("host.rotate_secret", "host's agent secret rotated"),
    ("demo.seed", "demo data loaded"),
    ("admin.add", "added in the admin"),
    ("admin.change", "changed in the admin"),
    ("admin.delete", "deleted in the admin"),
    ("token.create", "API token created"),
    ("token.delete", "API token deleted"),
]


def one_change_per_row(apps, schema_editor):
    """Rows written before change ids existed cannot be told apart: each is its own change."""
    entry = apps.get_model("console", "AuditEntry")
    for pk in entry.objects.values_list("pk", flat=True).iterator():
        entry.objects.filter(pk=pk).update(change_id=uuid.uuid4())


def admin_actions(apps, schema_editor):
    """Admin rows were `<model>.create/change/delete`; deployments keep their own actions."""
    entry = apps.get_model("console", "AuditEntry")
    known = {value for value, _ in ACTIONS}
    for old in entry.objects.exclude(action__in=known).values_list("action", flat=True).distinct():
        verb = old.rpartition(".")[2]
        new = {"create": "admin.add", "change": "admin.change", "delete": "admin.delete"}.get(verb)
        if new:
            entry.objects.filter(action=old).update(action=new)


class Migration(migrations.Migration):
    dependencies = [("console", "0003_acknowledge_events")]

    operations = [
        migrations.AlterField(
            model_name="auditentry",
            name="at",
            field=models.DateTimeField(db_index=True, default=django.utils.timezone.now),
        ),
        migrations.AddField(
            model_name="auditentry",
            name="change_id",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(one_change_per_row, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="auditentry",
            name="change_id",
            field=models.UUIDField(db_index=True, editable=False),
        ),
        migrations.RunPython(admin_actions, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(choices=ACTIONS, db_index=True, max_length=64),
        ),
    ]
