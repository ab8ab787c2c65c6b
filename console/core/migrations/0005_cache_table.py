"""The table of the database cache (settings.CACHES), made here so that `migrate` is all a
deployment runs; createcachetable skips a table that exists."""

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor):
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("console", "0004_audit_change_id")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
