from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from console.core.access import get_changeable_or_403, get_visible_or_404, require_permission
from console.core.csv_export import csv_response
from console.core.models import AuditEntry
from console.core.pagination import page_of
from console.proposals import guided, placement, progress, services, whatif
from console.proposals.filters import ProposalFilter
from console.proposals.forms import CommentForm, DecisionForm, LoadTestForm, ProposalForm
from console.proposals.gates import GateStatus
from console.proposals.models import Decision, GateResult, Proposal
from console.proposals.transitions import Event, IllegalTransition, State, allowed

_DETAIL = Proposal.objects.select_related(
    "served_model", "host", "deployment__served_model", "author", "mig_slice__gpu"
)


# The states in which the gates are (about to be) checked: pages poll while in them.
_RUNNING = (State.SUBMITTED, State.CHECKING)


def _require_author(user, proposal: Proposal, doing: str) -> None:
    if proposal.author_id != user.pk:
        raise PermissionDenied(
            _("Only its author, %(author)s, may %(doing)s this proposal.")
            % {"author": proposal.author.get_username(), "doing": doing}
        )


@permission_required("proposals.view_proposal", raise_exception=True)
def proposal_list(request):
    proposals = ProposalFilter(
        request.GET,
        queryset=Proposal.objects.visible_to(request.user).select_related(
            "served_model", "host", "author"
        ),
        request=request,
    )
    return render(
        request,
        "proposals/proposal_list.html",
        {
            "page": page_of(request, proposals.qs),
            "form": proposals.form,
            "can_add": request.user.has_perm("proposals.add_proposal"),
        },
    )


@permission_required("proposals.view_proposal", raise_exception=True)
def proposal_export(request):
    """The proposal list as filtered on its page, as CSV."""
    proposals = ProposalFilter(
        request.GET,
        queryset=Proposal.objects.visible_to(request.user).select_related(
            "served_model", "host", "author"
        ),
        request=request,
    )
    rows = (
        (p.pk, p.get_action_display(), p.served_model.name, p.host.name, p.state_label,
         p.revision, p.author.get_username(), p.isolation_mode, p.kv_reservation_bytes,
         p.admission_policy, p.created_at, p.updated_at)
        for p in proposals.qs.order_by("pk").iterator(chunk_size=500)
    )  # fmt: skip
    header = ["id", "action", "model", "host", "state", "revision", "author", "isolation",
              "kv_reservation_bytes", "above_reservation", "created", "updated"]  # fmt: skip
    return csv_response("proposals", header, rows)


# The inbox shows the oldest of the proposals whose checks failed; the list has them all.
FAILED_SHOWN = 50


def inbox(request):
    require_permission(request.user, Proposal, "approve")
    # The page's own poll asks for one table's rows: ?partial=1 what waits, ?partial=failed
    # what failed its checks.
    partial = request.GET.get("partial")
    if partial == "failed":
        return render(request, "proposals/_inbox_failed_rows.html", {"failed": _failed(request)})
    waiting = (
        Proposal.objects.visible_to(request.user)
        .awaiting(request.user)
        .select_related("served_model", "host", "author")
        .order_by("updated_at", "id")
    )
    if partial:
        return render(request, "proposals/_inbox_rows.html", {"page": page_of(request, waiting)})
    context = {"page": page_of(request, waiting), "failed": _failed(request)}
    return render(request, "proposals/inbox.html", context)


def _failed(request) -> list[Proposal]:
    """The oldest FAILED_SHOWN sent back by their gates, each with its failing gates of the
    current revision, which say why."""
    failed = list(
        Proposal.objects.visible_to(request.user)
        .failed_checks(request.user)
        .select_related("served_model", "host", "author")
        .order_by("updated_at", "id")[:FAILED_SHOWN]
    )
    failing = GateResult.objects.filter(
        proposal__in=failed, status__in=[s.value for s in GateStatus if not s.passed]
    ).order_by("id")
    for proposal in failed:
        proposal.failing = [r for r in failing if r.proposal_id == proposal.pk and
                            r.revision == proposal.revision]  # fmt: skip
    return failed


def _form_context(request, form: ProposalForm, proposal: Proposal | None, whatif=None) -> dict:
    host = form.chosen_host
    chosen_cards = {str(value) for value in (form["gpus"].value() or [])}
    matches = None
    if "find_host" in request.POST:
        matches = guided.search_hosts(request.POST.get("host", ""), timezone.now())
    return {
        "form": form,
        "proposal": proposal,
        "picker": guided.card_picker(host) if host else None,
        "chosen_cards": chosen_cards,
        "chosen_slice": str(form["mig_slice"].value() or ""),
        "isolation_notes": guided.isolation_notes(),
        "host_matches": matches,
        "whatif": whatif,
        "preview_url": (
            reverse("proposal-preview-edit", args=[proposal.pk])
            if proposal
            else reverse("proposal-preview")
        ),
    }


def _dry_run(request, form: ProposalForm):
    """The what-if of a valid form, nothing saved; None while the form is incomplete."""
    if not form.is_valid():
        return None
    proposal = form.instance
    if proposal.author_id is None:
        proposal.author = request.user
    if form.cleaned_data["mps_acknowledged"] and proposal.mps_acknowledged_at is None:
        proposal.mps_acknowledged_by, proposal.mps_acknowledged_at = request.user, timezone.now()
    result = whatif.dry_run(
        proposal, list(form.cleaned_data["gpus"]), list(form.cleaned_data["replaces"])
    )
    if form.kv_advice and not form.data.get("kv_reservation_gib"):
        form.data["kv_reservation_gib"] = form.kv_advice.gib  # shown pre-filled, editable
    return result


_REDRAW = ("preview", "find_host", "pick_host")


def _redraw_data(request):
    """The posted form as it should show again: a picked host replaces the typed one."""
    data = request.POST.copy()
    if "pick_host" in data:
        data["host"] = data["pick_host"]
    return data


def proposal_create(request):
    require_permission(request.user, Proposal, "add")
    if request.method == "POST" and any(name in request.POST for name in _REDRAW):
        form = ProposalForm(_redraw_data(request), preview=True)
        whatif_ = _dry_run(request, form) if "preview" in request.POST else None
        return render(
            request, "proposals/proposal_form.html", _form_context(request, form, None, whatif_)
        )
    initial = {"host": request.GET.get("host")} if request.GET.get("host") else {}
    form = ProposalForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            proposal = services.do_create_proposal(
                acting_user=request.user,
                gpus=form.cleaned_data["gpus"],
                replaces=form.cleaned_data["replaces"],
                mps_acknowledged=form.cleaned_data["mps_acknowledged"],
                submit="submit" in request.POST,
                **form.proposal_fields(),
            )
        except ValidationError as error:
            form.add_error(None, error)
        else:
            messages.success(request, _("Created %(proposal)s.") % {"proposal": proposal})
            return redirect(proposal)
    return render(request, "proposals/proposal_form.html", _form_context(request, form, None))


def _editable(request, pk: int) -> Proposal | None:
    proposal = get_changeable_or_403(request.user, _DETAIL, pk=pk)
    _require_author(request.user, proposal, _("edit"))
    if not allowed(proposal.state, Event.EDIT):
        messages.error(request, str(IllegalTransition(State(proposal.state), Event.EDIT)))
        return None
    return proposal


def proposal_edit(request, pk: int):
    proposal = _editable(request, pk)
    if proposal is None:
        return redirect("proposal-detail", pk=pk)
    if request.method == "POST" and any(name in request.POST for name in _REDRAW):
        form = ProposalForm(_redraw_data(request), instance=proposal, preview=True)
        whatif_ = _dry_run(request, form) if "preview" in request.POST else None
        return render(
            request,
            "proposals/proposal_form.html",
            _form_context(request, form, _DETAIL.get(pk=pk), whatif_),
        )
    form = ProposalForm(request.POST or None, instance=proposal)
    if request.method == "POST" and form.is_valid():
        try:
            proposal = services.do_edit_proposal(
                proposal,
                acting_user=request.user,
                gpus=form.cleaned_data["gpus"],
                replaces=form.cleaned_data["replaces"],
                mps_acknowledged=form.cleaned_data["mps_acknowledged"],
                **form.proposal_fields(),
            )
        except ValidationError as error:
            form.add_error(None, error)
        except IllegalTransition as error:
            form.add_error(None, str(error))
        else:
            if proposal.state == State.SUBMITTED:
                messages.success(
                    request,
                    _("Saved revision %(revision)s; the gates run again.")
                    % {"revision": proposal.revision},
                )
            else:
                messages.success(
                    request, _("Saved revision %(revision)s.") % {"revision": proposal.revision}
                )
            return redirect(proposal)
    return render(request, "proposals/proposal_form.html", _form_context(request, form, proposal))


def _preview(request, form: ProposalForm, proposal: Proposal | None) -> JsonResponse:
    whatif_ = _dry_run(request, form)
    context = _form_context(request, form, proposal, whatif_)
    return JsonResponse(
        {
            "cards": render_to_string("proposals/_card_picker.html", context, request),
            "whatif": render_to_string("proposals/_whatif.html", context, request),
            "kv_recommended_gib": form.kv_advice.gib if form.kv_advice else None,
            "kv_basis": form.kv_advice.formula if form.kv_advice else None,
            "elapsed_ms": whatif_.elapsed_ms if whatif_ else None,
        }
    )


@require_POST
def proposal_preview(request):
    """The what-if of the new-proposal form as it stands: fragments to swap in, nothing kept."""
    require_permission(request.user, Proposal, "add")
    return _preview(request, ProposalForm(_redraw_data(request), preview=True), None)


@require_POST
def proposal_preview_edit(request, pk: int):
    proposal = _editable(request, pk)
    if proposal is None:
        return JsonResponse({"error": "not editable"}, status=409)
    form = ProposalForm(_redraw_data(request), instance=proposal, preview=True)
    return _preview(request, form, _DETAIL.get(pk=pk))


def host_search(request):
    """Hosts matching ?q=, each with its best card's headroom: the form's host search."""
    require_permission(request.user, Proposal, "add")
    query = request.GET.get("q", "")[:100]
    return render(
        request,
        "proposals/_host_matches.html",
        {"host_matches": guided.search_hosts(query, timezone.now()), "query": query},
    )


def _audit_trail(proposal: Proposal):
    """The proposal's own rows and every row written in the same changes (apply's deployments)."""
    own = AuditEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Proposal), object_id=str(proposal.pk)
    )
    return (
        AuditEntry.objects.filter(change_id__in=own.values("change_id"))
        .select_related("host", "content_type")
        .order_by("-at", "-id")
    )


def _detail(request, proposal: Proposal, *, status: int = 200, error: str = "", **forms):
    user = request.user
    is_author = proposal.author_id == user.pk
    state = proposal.state
    before, after = placement.drawings(proposal)
    replaced = list(
        proposal.replaces.select_related("served_model", "mig_slice__gpu__host")
        .prefetch_related("gpus__host")
        .order_by("pk")
    )
    results = services.current_results(proposal)
    may_decide = user.has_perm("proposals.approve_proposal") and not is_author
    may_apply = user.has_perm("proposals.apply_proposal")
    may_change = user.has_perm("proposals.change_proposal") and is_author
    context = {
        "proposal": proposal,
        "results": results,
        "results_revision": proposal.revision,
        "older_results": proposal.gate_results.exclude(revision=proposal.revision)[:40],
        "decisions": proposal.decisions.select_related("decided_by"),
        "load_tests": proposal.load_tests.select_related("uploaded_by"),
        "notifications": proposal.notifications.all()[:20],
        "audit": _audit_trail(proposal),
        "before": before,
        "after": after,
        "targets": proposal.target_gpus(),
        "replaced": replaced,
        "can_edit": may_change and allowed(state, Event.EDIT),
        "can_submit": may_change and allowed(state, Event.SUBMIT),
        "can_attach": may_change and allowed(state, Event.EDIT),
        "can_decide": may_decide and allowed(state, Event.APPROVE),
        "can_reject": may_decide and allowed(state, Event.REJECT),
        "can_apply": may_apply and allowed(state, Event.APPLY),
        "can_verify": may_apply and allowed(state, Event.VERIFY),
        "can_roll_back": may_apply and allowed(state, Event.ROLL_BACK),
        "is_author": is_author,
        "error": error,
        "decision_form": forms.get("decision_form") or DecisionForm(),
        "load_test_form": forms.get("load_test_form") or LoadTestForm(),
        "roll_back_form": forms.get("roll_back_form") or CommentForm(prefix="roll_back"),
        "verify_form": CommentForm(prefix="verify"),
        "running": state in _RUNNING,
        "gate_progress": progress.gates_so_far(proposal.pk, proposal.revision)
        if state in _RUNNING
        else [],
        "status_version": f"{state}:{proposal.revision}:{proposal.updated_at.isoformat()}",
    }
    return render(request, "proposals/proposal_detail.html", context, status=status)


def proposal_detail(request, pk: int):
    return _detail(request, get_visible_or_404(request.user, _DETAIL, pk=pk))


def proposal_status(request, pk: int):
    """The detail page's poll: the state, and each gate's verdict as the checks finish."""
    proposal = get_visible_or_404(request.user, Proposal.objects.all(), pk=pk)
    running = proposal.state in _RUNNING
    results = services.current_results(proposal)
    if results:
        gates = [{"gate": r.gate, "title": r.title, "status": r.status} for r in results]
    else:
        gates = progress.gates_so_far(proposal.pk, proposal.revision) if running else []
    return JsonResponse(
        {
            "state": proposal.state,
            "state_label": proposal.state_label,
            "revision": proposal.revision,
            "running": running,
            "gates": gates,
            "version": f"{proposal.state}:{proposal.revision}:{proposal.updated_at.isoformat()}",
        }
    )


@require_POST
def proposal_submit(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, pk=pk)
    _require_author(request.user, proposal, _("submit"))
    try:
        services.do_submit(proposal, acting_user=request.user)
    except IllegalTransition as error:
        messages.error(request, str(error))
    else:
        messages.success(request, _("Submitted: the gates are being checked."))
    return redirect(proposal)


_DECISIONS = {
    Decision.Kind.APPROVE: services.do_approve_proposal,
    Decision.Kind.REJECT: services.do_reject,
    Decision.Kind.REQUEST_CHANGES: services.do_request_changes,
}


@require_POST
def proposal_decide(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, action="approve", pk=pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _detail(request, proposal, status=400, decision_form=form)
    decide = _DECISIONS[form.cleaned_data["decision"]]
    try:
        proposal = decide(proposal, acting_user=request.user, comment=form.cleaned_data["comment"])
    except services.FourEyesError as error:
        raise PermissionDenied(str(error)) from None
    except services.CommentRequired as error:
        form.add_error("comment", str(error))
        return _detail(request, proposal, status=400, decision_form=form)
    except (IllegalTransition, services.ProposalError) as error:
        return _detail(request, proposal, status=409, error=str(error), decision_form=form)
    messages.success(
        request,
        _("%(proposal)s: %(state)s.") % {"proposal": proposal, "state": proposal.state_label},
    )
    return redirect("proposal-inbox" if request.POST.get("next") == "inbox" else proposal)


@require_POST
def proposal_load_test(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, pk=pk)
    _require_author(request.user, proposal, _("attach load tests to"))
    form = LoadTestForm(request.POST, request.FILES)
    if not form.is_valid():
        return _detail(request, proposal, status=400, load_test_form=form)
    try:
        services.do_attach_load_test(
            proposal,
            acting_user=request.user,
            run=form.cleaned_data["run"],
            files=[f.name for f in form.cleaned_data["files"]],
        )
    except IllegalTransition as error:
        return _detail(request, proposal, status=409, error=str(error), load_test_form=form)
    messages.success(request, _("Load test attached; the gates run again."))
    return redirect(proposal)


@require_POST
def proposal_apply(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, action="apply", pk=pk)
    try:
        services.do_apply(proposal, acting_user=request.user)
    except (IllegalTransition, services.ProposalError, ValidationError) as error:
        messages.error(request, _("Not applied: %(error)s") % {"error": _text(error)})
    else:
        messages.success(
            request,
            _("Applied: %(host)s's placement now shows the change.") % {"host": proposal.host},
        )
    return redirect(proposal)


@require_POST
def proposal_verify(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, action="apply", pk=pk)
    form = CommentForm(request.POST, prefix="verify")
    form.is_valid()
    try:
        services.do_verify(
            proposal, acting_user=request.user, comment=form.cleaned_data.get("comment", "")
        )
    except IllegalTransition as error:
        messages.error(request, str(error))
    else:
        messages.success(request, _("Verified."))
    return redirect(proposal)


@require_POST
def proposal_roll_back(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, action="apply", pk=pk)
    form = CommentForm(request.POST, prefix="roll_back")
    form.is_valid()
    try:
        services.do_roll_back(
            proposal, acting_user=request.user, comment=form.cleaned_data.get("comment", "")
        )
    except services.CommentRequired as error:
        form.add_error("comment", str(error))
        return _detail(request, proposal, status=400, roll_back_form=form)
    except (IllegalTransition, ValidationError) as error:
        messages.error(request, _("Not rolled back: %(error)s") % {"error": _text(error)})
    else:
        messages.success(request, _("Rolled back: the deployment is as it was before."))
    return redirect(proposal)


def _text(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return " ".join(error.messages)
    return str(error)
