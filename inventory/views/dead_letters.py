"""Dead letters for on-call: what ingest could not write, why, and replay or discard."""

import json

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from console.core.access import get_changeable_or_403, get_visible_or_404
from console.core.pagination import page_of
from console.core.reason_text import render_here
from inventory.ingest.dead_letters import decoded
from inventory.models import DeadLetter
from inventory.services import AlreadyResolved, do_discard_dead_letter, do_replay_dead_letter

# A page shows this much of a stored message; the rest is in the download.
SHOWN_CHARACTERS = 64 * 1024


@permission_required("inventory.view_deadletter", raise_exception=True)
def dead_letter_list(request):
    letters = DeadLetter.objects.visible_to(request.user)
    status = request.GET.get("status", DeadLetter.Status.PENDING)
    if status not in DeadLetter.Status.values:
        status = ""
    if status:
        letters = letters.filter(status=status)
    page = page_of(request, letters.defer("body"))
    return render(
        request,
        "inventory/dead_letter_list.html",
        {
            "page": page,
            "status": status,
            "statuses": DeadLetter.Status.choices,
            "can_replay": request.user.has_perm("inventory.replay_deadletter"),
        },
    )


def dead_letter_detail(request, pk: int):
    letter = get_visible_or_404(request.user, DeadLetter.objects, pk=pk)
    payload = decoded(letter)
    if payload is not None:
        shown = json.dumps(payload, indent=1, ensure_ascii=False)
    else:
        shown = bytes(letter.body).decode("utf-8", errors="backslashreplace")
    return render(
        request,
        "inventory/dead_letter_detail.html",
        {
            "letter": letter,
            "shown": shown[:SHOWN_CHARACTERS].replace("\x00", "\\x00"),
            "cut": len(shown) > SHOWN_CHARACTERS or letter.size > len(letter.body),
            "can_replay": request.user.has_perm("inventory.replay_deadletter"),
        },
    )


@require_POST
def dead_letter_replay(request, pk: int):
    letter = get_changeable_or_403(request.user, DeadLetter.objects, action="replay", pk=pk)
    try:
        failed = do_replay_dead_letter(letter, acting_user=request.user)
    except AlreadyResolved as error:
        messages.info(request, _("%(letter)s: %(error)s.") % {"letter": letter, "error": error})
        return redirect("dead-letter-detail", pk=pk)
    if failed:
        messages.error(
            request,
            _("Replay failed again (%(code)s): %(failure)s")
            % {"code": failed.code, "failure": _failure(failed)},
        )
    else:
        messages.success(
            request, _("%(letter)s replayed: its batch is written.") % {"letter": letter}
        )
    return redirect("dead-letter-detail", pk=pk)


def _failure(failed) -> str:
    said = render_here(failed.reason())
    return f"{failed.path}: {said}" if failed.path else said


@require_POST
def dead_letter_discard(request, pk: int):
    letter = get_changeable_or_403(request.user, DeadLetter.objects, action="replay", pk=pk)
    try:
        do_discard_dead_letter(
            letter, acting_user=request.user, comment=request.POST.get("comment", "")[:1000]
        )
        messages.success(request, _("%(letter)s discarded.") % {"letter": letter})
    except AlreadyResolved as error:
        messages.info(request, _("%(letter)s: %(error)s.") % {"letter": letter, "error": error})
    return redirect("dead-letter-list")
