"""Every change to a runbook note goes through here.

One change (transaction and change id), one revision, one audit row per edit.
"""

import dataclasses

from django.utils.text import slugify

from console.core.auditing import Action, changed_fields, snapshot
from console.core.auditing.changes import atomic_change, audited, record_created
from runbooks.library import LibraryNote, load_library
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
    record_created(note, Action.RUNBOOK_CREATE, acting_user, host=_audit_host(note),
                   comment=summary)  # fmt: skip
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
    if "tags" in changes:
        changes["tags"] = _normalise_tags(changes["tags"])
    # An edit that changes nothing is no new version, and so no row.
    with audited(current, Action.RUNBOOK_UPDATE, acting_user, comment=summary,
                 only_if_changed=True) as row:  # fmt: skip
        for field, value in changes.items():
            setattr(current, field, value)
        if changed_fields(row.before, snapshot(current)):
            _save_version(current, acting_user, summary)
            row.host = _audit_host(current)  # as edited: the edit may change its scope or host
    return current


def _save_version(note: RunbookNote, acting_user, summary: str) -> None:
    note.version += 1
    note.updated_by = acting_user
    if acting_user is not None:
        # The note page showed the pending default text beside the editor: saving is the review.
        note.library_update = ""
    note.full_clean()
    note.save()
    _add_revision(note, acting_user, summary)


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


@dataclasses.dataclass
class LibrarySync:
    installed: list[str] = dataclasses.field(default_factory=list)
    updated: list[str] = dataclasses.field(default_factory=list)
    # Edited here: the newer default text waits beside the note.
    flagged: list[str] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)


def _untouched(note: RunbookNote) -> bool:
    """Installed from the library and never edited by a person since."""
    return note.from_library and not note.revisions.exclude(edited_by_name="system").exists()


def _same_text(note: RunbookNote, entry: LibraryNote) -> bool:
    return (note.title, note.body, list(note.tags)) == (
        entry.title,
        entry.body,
        _normalise_tags(entry.tags),
    )


def _set_library_fields(note: RunbookNote, acting_user, comment: str, **values) -> None:
    with audited(note, Action.RUNBOOK_UPDATE, acting_user, host=_audit_host(note),
                 comment=comment):  # fmt: skip
        for name, value in values.items():
            setattr(note, name, value)
        note.save(update_fields=list(values))


@atomic_change
def do_sync_library(*, acting_user=None, notes: list[LibraryNote] | None = None) -> LibrarySync:
    """Bring the shipped default notes to an installation: install new ones, update the ones
    nobody edited here (a revision and an audit row each), and for edited ones keep a newer
    shipped text in ``library_update`` for a person to merge, never overwriting their edit.
    Safe to run again: a shipped text already offered is not offered twice. The Chinese twins
    ship with the English notes and are kept in step the same way."""
    result = LibrarySync()
    shipped = load_library() + load_library(language="zh-hans")
    for entry in shipped if notes is None else notes:
        note = RunbookNote.objects.select_for_update().filter(slug=entry.slug).first()
        if note is None:
            note = do_create_note(
                acting_user=acting_user,
                summary="Installed from the default library",
                slug=entry.slug,
                title=entry.title,
                body=entry.body,
                tags=list(entry.tags),
                from_library=True,
            )
            note.library_text = entry.body
            note.save(update_fields=["library_text"])
            result.installed.append(entry.slug)
        elif _same_text(note, entry):
            if note.library_text != entry.body or note.library_update:
                _set_library_fields(note, acting_user, "In step with the default library",
                                    library_text=entry.body, library_update="")  # fmt: skip
            result.unchanged.append(entry.slug)
        elif _untouched(note):
            note = do_update_note(
                note,
                acting_user=acting_user,
                expected_version=note.version,
                summary="Updated from the default library",
                title=entry.title,
                body=entry.body,
                tags=list(entry.tags),
            )
            note.library_text = entry.body
            note.save(update_fields=["library_text"])
            result.updated.append(entry.slug)
        elif note.library_text != entry.body:
            _set_library_fields(note, acting_user, "A newer default text waits beside the note",
                                library_text=entry.body, library_update=entry.body)  # fmt: skip
            result.flagged.append(entry.slug)
        else:
            result.unchanged.append(entry.slug)
    return result
