from django.db import migrations, models


def keep_the_gaps_counted_so_far(apps, schema_editor):
    # The ranges of the samplers before this migration are not known: their gaps, as counted
    # until now, stay counted.
    CollectorStatus = apps.get_model("inventory", "CollectorStatus")
    for status in CollectorStatus.objects.filter(missing_batches__gt=0):
        status.sequences = {"samplers": {}, "pruned_missing": status.missing_batches}
        status.save(update_fields=["sequences"])


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0023_ingested_batch_claims_lighter"),
    ]

    operations = [
        migrations.AddField(
            model_name="collectorstatus",
            name="sequences",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(keep_the_gaps_counted_so_far, migrations.RunPython.noop),
    ]
