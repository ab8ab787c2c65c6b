from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _

from console.core.access import get_changeable_or_403, get_visible_or_404, require_permission
from console.core.pagination import page_of
from runbooks.diff import diff_lines
from runbooks.filters import NoteFilter
from runbooks.forms import NoteForm
from runbooks.library import translation_slugs
from runbooks.models import RunbookNote, RunbookRevision
from runbooks.rendering import render_markdown
from runbooks.services import StaleNoteError, do_create_note, do_update_note


@permission_required("runbooks.view_runbooknote", raise_exception=True)
def note_list(request):
    notes = NoteFilter(
        request.GET,
        queryset=RunbookNote.objects.visible_to(request.user)
        .select_related("host", "served_model")
        .order_by("title", "pk"),
        request=request,
    )
    all_tags = sorted(
        {t for tags in RunbookNote.objects.values_list("tags", flat=True) for t in tags}
    )
    return render(
        request,
        "runbooks/note_list.html",
        {
            "page": page_of(request, notes.qs),
            "form": notes.form,
            "all_tags": all_tags,
            "can_add": request.user.has_perm("runbooks.add_runbooknote"),
        },
    )


def note_detail(request, slug: str):
    note = get_visible_or_404(request.user, RunbookNote.objects, slug=slug)
    english, chinese = translation_slugs(note.slug)
    other = english if note.slug == chinese else chinese
    return render(
        request,
        "runbooks/note_detail.html",
        {
            "note": note,
            "body_html": render_markdown(note.body),
            "can_edit": request.user.has_perm("runbooks.change_runbooknote"),
            # The same note in the other language, when the library has one.
            "translation": RunbookNote.objects.visible_to(request.user).filter(slug=other).first(),
        },
    )


def note_create(request):
    require_permission(request.user, RunbookNote, "add")
    form = NoteForm(request.POST or None, initial=_initial_target(request))
    if request.method == "POST" and form.is_valid():
        note = do_create_note(
            acting_user=request.user,
            summary=form.cleaned_data["summary"] or "Created",
            **form.note_fields(),
        )
        messages.success(request, _("Created “%(title)s”.") % {"title": note.title})
        return redirect(note)
    return render(request, "runbooks/note_form.html", {"form": form, "note": None})


def _initial_target(request) -> dict:
    initial = {}
    if request.GET.get("host"):
        initial.update(scope=RunbookNote.Scope.HOST, host=request.GET["host"])
    elif request.GET.get("model"):
        initial.update(scope=RunbookNote.Scope.MODEL, served_model=request.GET["model"])
    return initial


def note_edit(request, slug: str):
    note = get_changeable_or_403(request.user, RunbookNote.objects, slug=slug)
    form = NoteForm(request.POST or None, instance=note)
    if request.method == "POST" and form.is_valid():
        try:
            note = do_update_note(
                note,
                acting_user=request.user,
                expected_version=form.cleaned_data["version"] or note.version,
                summary=form.cleaned_data["summary"],
                **form.note_fields(),
            )
        except StaleNoteError as stale:
            # Keep the editor's text in the form; show what the other person saved beside it.
            form.add_error(None, f"{stale} Your text is kept below; merge it and save again.")
            form.data = form.data.copy()
            form.data["version"] = stale.note.version
            return render(
                request,
                "runbooks/note_form.html",
                {"form": form, "note": note, "conflict": stale.note},
                status=409,
            )
        messages.success(
            request,
            _("Saved “%(title)s” (version %(version)s).")
            % {"title": note.title, "version": note.version},
        )
        return redirect(note)
    return render(request, "runbooks/note_form.html", {"form": form, "note": note})


def note_history(request, slug: str):
    note = get_visible_or_404(request.user, RunbookNote.objects, slug=slug)
    revisions = note.revisions.select_related("edited_by").order_by("-version")
    return render(request, "runbooks/note_history.html", {"note": note, "revisions": revisions})


def note_revision(request, slug: str, version: int):
    note = get_visible_or_404(request.user, RunbookNote.objects, slug=slug)
    revision = get_object_or_404(RunbookRevision, note=note, version=version)
    previous = note.revisions.filter(version__lt=version).order_by("-version").first()
    return render(
        request,
        "runbooks/note_revision.html",
        {
            "note": note,
            "revision": revision,
            "previous": previous,
            "diff": diff_lines(previous.body if previous else "", revision.body),
            "title_changed": previous is not None and previous.title != revision.title,
            "tags_changed": previous is not None and previous.tags != revision.tags,
        },
    )
