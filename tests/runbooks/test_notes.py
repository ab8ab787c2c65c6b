"""Editing runbook notes: history with who, when and the diff; audit rows; conflicts."""

import pytest

from console.core.models import AuditEntry
from inventory.models import Deployment
from runbooks.models import MPS_NOTE_SLUG, RunbookNote
from runbooks.services import StaleNoteError, do_create_note, do_update_note
from tests.factories import DeploymentFactory, GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


def _form(note, **overrides):
    data = {
        "title": note.title,
        "scope": note.scope,
        "tags": ", ".join(note.tags),
        "body": note.body,
        "summary": "",
        "version": note.version,
        "host": note.host_id or "",
        "served_model": note.served_model_id or "",
    }
    data.update(overrides)
    return data


def test_an_edit_through_the_console_keeps_who_when_and_the_diff(client_as, personas):
    note = RunbookNote.objects.get(slug="oom-triage")
    client = client_as("oncall")
    response = client.post(
        f"/runbooks/{note.slug}/edit/",
        _form(note, body=note.body + "\nCheck `inactive_split_bytes` first.\n", summary="tip"),
    )
    assert response.status_code == 302
    note.refresh_from_db()
    assert note.version == 2
    latest = note.revisions.get(version=2)
    assert latest.edited_by == personas["oncall"]
    assert latest.summary == "tip"

    page = client.get(f"/runbooks/{note.slug}/history/2/").content.decode()
    assert "diff-add" in page
    assert "Check <code>inactive_split_bytes</code>" not in page  # the diff shows source text
    assert "Check `inactive_split_bytes` first." in page

    entry = AuditEntry.objects.get(action="runbook.update", object_id=str(note.pk))
    assert entry.actor == personas["oncall"]
    assert entry.changed_fields == ["body", "updated_by_id", "version"]
    assert entry.before["version"] == 1 and entry.after["version"] == 2


def test_saving_an_unchanged_note_writes_no_revision(personas):
    note = RunbookNote.objects.get(slug="oom-triage")
    do_update_note(note, acting_user=personas["oncall"], expected_version=1, title=note.title)
    note.refresh_from_db()
    assert note.version == 1
    assert not AuditEntry.objects.filter(action="runbook.update").exists()


def test_a_stale_edit_is_refused_and_the_editors_text_is_kept(client_as, personas):
    note = RunbookNote.objects.get(slug="kv-reservation")
    do_update_note(
        note, acting_user=personas["approver"], expected_version=1, body="approver's text"
    )
    response = client_as("oncall").post(
        f"/runbooks/{note.slug}/edit/", _form(note, version=1, body="oncall's careful text")
    )
    assert response.status_code == 409
    page = response.content.decode()
    assert "oncall&#x27;s careful text" in page or "oncall's careful text" in page
    assert "approver&#x27;s text" in page or "approver's text" in page
    note.refresh_from_db()
    assert note.body == "approver's text"
    assert note.version == 2


def test_the_service_refuses_a_stale_version(personas):
    note = RunbookNote.objects.get(slug="kv-reservation")
    do_update_note(note, acting_user=personas["oncall"], expected_version=1, body="v2")
    with pytest.raises(StaleNoteError):
        do_update_note(note, acting_user=personas["oncall"], expected_version=1, body="lost?")


def test_form_errors_name_the_field_and_lose_nothing(client_as):
    response = client_as("oncall").post(
        "/runbooks/new/",
        {"title": "", "scope": "host", "tags": "bad tag!", "body": "keep me", "summary": ""},
    )
    assert response.status_code == 200
    form = response.context["form"]
    assert "title" in form.errors
    assert "host" in form.errors
    assert "tags" in form.errors
    assert b"keep me" in response.content


def test_creating_a_host_note_audits_it_against_the_host(client_as, personas):
    host = HostFactory()
    response = client_as("approver").post(
        "/runbooks/new/",
        {
            "title": "Card 5 fan",
            "scope": "host",
            "host": host.pk,
            "tags": "incident",
            "body": "Fan replaced 2026-11-02.",
        },
    )
    assert response.status_code == 302
    note = RunbookNote.objects.get(title="Card 5 fan")
    assert note.host == host
    assert note.created_by == personas["approver"]
    assert AuditEntry.objects.get(action="runbook.create").host == host


def test_the_slug_never_shadows_a_page(personas):
    note = do_create_note(
        acting_user=personas["oncall"], title="New", body="x", scope="topic", tags=[]
    )
    assert note.slug != "new"


def _host_with(isolation_mode):
    gpu = GpuFactory()
    DeploymentFactory(
        host=gpu.host,
        gpus=[gpu],
        isolation_mode=isolation_mode,
        mps_active_thread_percentage=50 if isolation_mode == Deployment.Isolation.MPS else None,
    )
    return gpu.host


def test_an_mps_host_shows_the_mps_note_and_its_pinned_notes(client_as, personas):
    host = _host_with(Deployment.Isolation.MPS)
    do_create_note(
        acting_user=personas["oncall"],
        title="This host's MPS daemon",
        body="Pipe dir is /run/mps.",
        scope="host",
        host=host,
        tags=[],
    )
    page = client_as("manager").get(f"/hosts/{host.name}/")
    notes = {note.slug for note in page.context["notes"]}
    assert MPS_NOTE_SLUG in notes
    assert "this-hosts-mps-daemon" in notes
    assert "mps-server-crash" in notes  # tagged mps


def test_the_mps_note_stays_even_when_someone_removes_its_tag(personas):
    host = _host_with(Deployment.Isolation.MPS)
    note = RunbookNote.objects.get(slug=MPS_NOTE_SLUG)
    do_update_note(note, acting_user=personas["oncall"], expected_version=1, tags=["isolation"])
    shown = RunbookNote.objects.for_host(host, host.isolation_modes())
    assert MPS_NOTE_SLUG in {n.slug for n in shown}


def test_a_gpu_group_host_does_not_show_mps_notes(client_as):
    host = _host_with(Deployment.Isolation.GPU_GROUP)
    page = client_as("oncall").get(f"/hosts/{host.name}/")
    notes = {note.slug for note in page.context["notes"]}
    assert MPS_NOTE_SLUG not in notes
    assert "choosing-isolation" in notes  # tagged gpu-group
