"""Every change to a runbook note goes through here.

One change (transaction and change id), one revision, one audit row per edit.
"""

from django.utils.text import slugify

from console.audit import Action, changed_fields, snapshot
from console.audit.changes import atomic_change, record
from runbooks.models import RunbookNote, RunbookRevision


class StaleNoteError(Exception):
    """The note changed since the editor loaded it; saving would silently drop that change."""

    def __init__(self, note: RunbookNote):
        self.note = note
        super().__init__(
            f"{note.title!r} was changed by {note.updated_by or 'someone'} "
            f"(now version {note.version}) while you were editing."
        )


_EDITABLE = ("title", "body", "scope", "host", "served_model", "tags")


# Path segments of the runbook pages that a note's slug must not shadow.
_RESERVED_SLUGS = {"new"}


def unique_slug(title: str) -> str:
    base = slugify(title)[:70] or "note"
    slug, n = base, 2
    while slug in _RESERVED_SLUGS or RunbookNote.objects.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


def _normalise_tags(tags) -> list[str]:
    return sorted({tag.strip().lower() for tag in tags if tag.strip()})


def _audit_host(note: RunbookNote):
    return note.host if note.scope == RunbookNote.Scope.HOST else None


@atomic_change
def do_create_note(*, acting_user, summary: str = "Created", **fields) -> RunbookNote:
    fields["tags"] = _normalise_tags(fields.get("tags", []))
    slug = fields.pop("slug", None) or unique_slug(fields["title"])
    note = RunbookNote(slug=slug, created_by=acting_user, updated_by=acting_user, **fields)
    note.full_clean()
    note.save()
    _add_revision(note, acting_user, summary)
    record(
        actor=acting_user,
        action=Action.RUNBOOK_CREATE,
        obj=note,
        before=None,
        after=snapshot(note),
        host=_audit_host(note),
        comment=summary,
    )
    return note


@atomic_change
def do_update_note(
    note: RunbookNote, *, acting_user, expected_version: int, summary: str = "", **changes
) -> RunbookNote:
    unknown = set(changes) - set(_EDITABLE)
    if unknown:
        raise TypeError(f"not editable: {', '.join(sorted(unknown))}")
    # Lock the row so two editors saving at once cannot both pass the version check.
    current = RunbookNote.objects.select_for_update().get(pk=note.pk)
    if current.version != expected_version:
        raise StaleNoteError(current)
    before = snapshot(current)
    if "tags" in changes:
        changes["tags"] = _normalise_tags(changes["tags"])
    for field, value in changes.items():
        setattr(current, field, value)
    if changed_fields(before, snapshot(current)) == []:
        return current
    current.version += 1
    current.updated_by = acting_user
    current.full_clean()
    current.save()
    _add_revision(current, acting_user, summary)
    record(
        actor=acting_user,
        action=Action.RUNBOOK_UPDATE,
        obj=current,
        before=before,
        after=snapshot(current),
        host=_audit_host(current),
        comment=summary,
    )
    return current


def _add_revision(note: RunbookNote, acting_user, summary: str) -> RunbookRevision:
    return RunbookRevision.objects.create(
        note=note,
        version=note.version,
        title=note.title,
        body=note.body,
        tags=note.tags,
        edited_by=acting_user,
        edited_by_name=acting_user.get_username() if acting_user else "system",
        summary=summary[:200],
    )
