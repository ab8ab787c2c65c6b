"""Shipped default notes reach an existing installation without overwriting local edits."""

import dataclasses

import pytest
from django.core.management import call_command

from console.core.models import AuditEntry
from runbooks.library import load_library
from runbooks.models import RunbookNote
from runbooks.services import do_sync_library, do_update_note

pytestmark = pytest.mark.django_db


def _shipped(slug, body):
    entry = next(note for note in load_library() if note.slug == slug)
    return dataclasses.replace(entry, body=body)


def test_an_untouched_note_takes_the_new_text_with_a_revision():
    note = RunbookNote.objects.get(slug="oom-triage")
    new = _shipped("oom-triage", note.body + "\nA new paragraph.\n")
    result = do_sync_library(notes=[new])
    note.refresh_from_db()
    assert result.updated == ["oom-triage"]
    assert note.body == new.body and note.version == 2 and note.library_update == ""
    assert note.revisions.first().summary == "Updated from the default library"
    assert AuditEntry.objects.filter(action="runbook.update", object_id=str(note.pk)).exists()
    assert do_sync_library(notes=[new]).unchanged == ["oom-triage"]  # safe to run again


def test_an_edited_note_keeps_its_edit_and_gets_the_new_text_beside_it(personas):
    note = RunbookNote.objects.get(slug="mps-setup")
    do_update_note(note, acting_user=personas["manager"], expected_version=1,
                   body=note.body + "\nOur hosts use /run/mps.\n")  # fmt: skip
    note.refresh_from_db()
    edited = note.body
    new = _shipped("mps-setup", "Rewritten upstream.\n")
    assert do_sync_library(notes=[new]).flagged == ["mps-setup"]
    note.refresh_from_db()
    assert note.body == edited and note.library_update == "Rewritten upstream.\n"
    # Offered once: a second run does not flag the same text again.
    assert do_sync_library(notes=[new]).unchanged == ["mps-setup"]
    # A person's save after reading it clears the offer.
    do_update_note(note, acting_user=personas["manager"], expected_version=note.version,
                   body=edited + "merged\n")  # fmt: skip
    note.refresh_from_db()
    assert note.library_update == ""


def test_a_missing_note_is_installed_and_the_command_reports(capsys):
    RunbookNote.objects.filter(slug="xid-triage").delete()
    call_command("sync_runbook_library")
    out = capsys.readouterr().out
    assert "installed: xid-triage" in out
    note = RunbookNote.objects.get(slug="xid-triage")
    assert note.from_library and note.library_text == note.body
