"""Install the Simplified Chinese notes of the default library (runbooks/library/*.zh-hans.md)."""

from django.db import migrations

from runbooks.library import load_library


def install(apps, schema_editor):
    RunbookNote = apps.get_model("runbooks", "RunbookNote")
    RunbookRevision = apps.get_model("runbooks", "RunbookRevision")
    for entry in load_library(language="zh-hans"):
        if RunbookNote.objects.filter(slug=entry.slug).exists():
            continue
        note = RunbookNote.objects.create(
            slug=entry.slug,
            title=entry.title,
            body=entry.body,
            scope="global",
            tags=sorted(entry.tags),
            from_library=True,
            library_text=entry.body,
        )
        RunbookRevision.objects.create(
            note=note,
            version=1,
            title=note.title,
            body=note.body,
            tags=note.tags,
            edited_by_name="system",
            summary="Installed from the default library (Simplified Chinese)",
        )


def uninstall(apps, schema_editor):
    RunbookNote = apps.get_model("runbooks", "RunbookNote")
    RunbookNote.objects.filter(from_library=True, version=1, slug__endswith="-zh").delete()


class Migration(migrations.Migration):
    dependencies = [("runbooks", "0004_runbook_note_verbose_name")]

    operations = [migrations.RunPython(install, uninstall)]
