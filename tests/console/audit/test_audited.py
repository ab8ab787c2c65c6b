"""`audited`: one row for what a block does to an object, its state before and after."""

import pytest

from console.core.auditing import Action
from console.core.auditing.changes import audited, open_change, record_created
from console.core.models import AuditEntry
from tests.factories import HostFactory, RunbookNoteFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_the_row_holds_the_state_before_the_block_and_after_it():
    note = RunbookNoteFactory(title="Drain first")
    user = UserFactory(username="ana")
    with audited(note, Action.RUNBOOK_UPDATE, user, comment="retitled"):
        note.title = "Drain, then restart"
        note.save()
    entry = AuditEntry.objects.get()
    assert entry.action == Action.RUNBOOK_UPDATE
    assert entry.before["title"] == "Drain first"
    assert entry.after["title"] == "Drain, then restart"
    assert (entry.actor, entry.actor_name, entry.comment) == (user, "ana", "retitled")
    assert entry.object_id == str(note.pk)


def test_the_comment_and_host_set_inside_the_block_land_on_the_row():
    host = HostFactory()
    with audited(host, Action.HOST_ROTATE_SECRET, None, comment="asked for") as row:
        host.agent_secret = "rotated"
        host.save()
        row.comment, row.host = "rotated by hand", host
    entry = AuditEntry.objects.get()
    assert entry.comment == "rotated by hand"
    assert entry.host == host
    assert entry.actor is None and entry.actor_name == "system"


def test_the_block_sees_the_state_before():
    note = RunbookNoteFactory(body="old")
    with audited(note, Action.RUNBOOK_UPDATE, None) as row:
        note.body = "new"
        assert row.before["body"] == "old"


def test_only_if_changed_writes_no_row_when_nothing_changed():
    note = RunbookNoteFactory()
    with audited(note, Action.RUNBOOK_UPDATE, None, only_if_changed=True):
        note.save()  # saved, but with the same values: only its timestamps move
    assert not AuditEntry.objects.exists()
    with audited(note, Action.RUNBOOK_UPDATE, None, only_if_changed=True):
        note.tags = ["gpu"]
        note.save()
    assert AuditEntry.objects.get().after["tags"] == ["gpu"]


def test_a_block_that_raises_records_nothing_and_the_error_goes_on():
    note = RunbookNoteFactory(title="Kept")
    with (
        pytest.raises(RuntimeError, match="refused"),
        audited(note, Action.RUNBOOK_UPDATE, None),
    ):
        note.title = "Never recorded"
        raise RuntimeError("refused")
    assert not AuditEntry.objects.exists()


def test_a_state_of_its_own_pictures_the_object():
    note = RunbookNoteFactory(title="Before", body="unchanged")
    with audited(note, Action.RUNBOOK_UPDATE, None, state=lambda n: {"title": n.title}):
        note.title = "After"
        note.save()
    entry = AuditEntry.objects.get()
    assert (entry.before, entry.after) == ({"title": "Before"}, {"title": "After"})


def test_rows_of_one_change_share_its_id():
    first, second = RunbookNoteFactory(), RunbookNoteFactory()
    with open_change() as change:
        for note in (first, second):
            with audited(note, Action.RUNBOOK_UPDATE, None):
                note.body = "edited"
                note.save()
    assert {entry.change_id for entry in AuditEntry.objects.all()} == {change.id}


def test_a_created_object_has_nothing_before_it():
    host = HostFactory()
    record_created(host, Action.HOST_REGISTER, None, host=host, comment="registered")
    entry = AuditEntry.objects.get()
    assert entry.before is None
    assert entry.after["name"] == host.name
    assert (entry.host, entry.comment) == (host, "registered")
