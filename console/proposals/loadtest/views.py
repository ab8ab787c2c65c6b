"""Pages of a combined load test the console runs: start, cancel, live status, result."""

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from console.core.access import get_changeable_or_403, get_visible_or_404
from console.core.reason_text import render_here
from console.proposals.gates import then
from console.proposals.loadtest import inputs as loadtest_inputs
from console.proposals.loadtest import services as loadtest_services
from console.proposals.loadtest.failures import failure_reason
from console.proposals.loadtest.plan import Api, Phases, PlanError
from console.proposals.models import LoadTest, Proposal
from console.proposals.transitions import IllegalTransition
from inventory.analytics.reasons import Reason
from inventory.models import Deployment

_DETAIL = Proposal.objects.select_related("served_model", "host", "deployment__served_model")


def _require_author(user, proposal: Proposal, doing: str) -> None:
    if proposal.author_id != user.pk:
        raise PermissionDenied(
            f"Only its author, {proposal.author.get_username()}, may {doing} this proposal."
        )


PLAN_MESSAGES = {
    "no_endpoint": _("{deployment} has no inference endpoint to drive: set its endpoint URL."),
    "no_rate": _(
        "{deployment} has no busy-hour rate: no engine history, and none given "
        "(the proposal's expected requests per second)."
    ),
    "no_targets": _("Nothing runs on the cards of {host}."),
    "bad_rate": _("{deployment}: a rate of {rate} requests/s cannot be driven."),
    "bad_duration": _("A test of {duration_s} s is not possible."),
    "bad_mix": _("A long-request share of {long_share} is not a share."),
    "too_long": _(
        "A test of {duration_s} s does not fit the worker's limit of {limit_s} s "
        "(LOADTEST_TASK_TIME_LIMIT_S), with the wait for its telemetry."
    ),
}


class StartLoadTestForm(forms.Form):
    ramp_s = forms.FloatField(label=_("Ramp (s)"), initial=30, min_value=1, max_value=3600)
    hold_s = forms.FloatField(label=_("Hold (s)"), initial=120, min_value=5, max_value=3600)
    rate_scale = forms.FloatField(
        label=_("Share of the busy-hour traffic"),
        initial=1.0,
        min_value=0.001,
        max_value=10,
        help_text=_("1: the busy hour itself; 0.1: a tenth of it, the ratio kept."),
    )
    past_bound = forms.BooleanField(
        label=_("Then ramp past the busy hour until a bound gives"), required=False
    )
    cold_start = forms.BooleanField(
        label=_("Start every engine at the same moment first"), required=False, initial=True
    )
    endpoint_url = forms.URLField(
        assume_scheme="http",
        label=_("Endpoint of the proposed model"),
        required=False,
        help_text=_("For a new model only: where its candidate deployment answers."),
    )
    endpoint_api = forms.ChoiceField(
        label=_("Its API"), choices=Deployment.EndpointApi.choices, required=False
    )


def plan_error_text(error: PlanError) -> str:
    return str(PLAN_MESSAGES.get(error.code, error.code)).format(**error.params)


@require_POST
def load_test_start(request, pk: int):
    proposal = get_changeable_or_403(request.user, _DETAIL, pk=pk)
    _require_author(request.user, proposal, "run load tests of")
    form = StartLoadTestForm(request.POST)
    if not form.is_valid():
        return render(
            request,
            "proposals/loadtest_start_refused.html",
            {"proposal": proposal, "form": form},
            status=400,
        )
    data = form.cleaned_data
    phases = Phases(
        ramp_s=data["ramp_s"],
        hold_s=data["hold_s"],
        past_bound=data["past_bound"],
        cold_start=data["cold_start"],
    )
    try:
        plan = loadtest_inputs.plan_for_proposal(
            proposal,
            endpoint_url=data["endpoint_url"],
            endpoint_api=data["endpoint_api"] or Api.COMPLETIONS,
            phases=phases,
            rate_scale=data["rate_scale"],
        )
        loadtest_services.do_start_load_test(proposal, acting_user=request.user, plan=plan)
    except PlanError as error:
        messages.error(request, plan_error_text(error))
    except loadtest_services.LoadTestBusy:
        messages.error(request, _("A combined test of this proposal is running already."))
    except IllegalTransition as error:
        messages.error(request, str(error))
    else:
        messages.success(request, _("Combined load test queued."))
    return redirect(proposal.get_absolute_url() + "#console-load-test")


def _test_of(request, pk: int, test_pk: int, *, change: bool = False) -> LoadTest:
    get = get_changeable_or_403 if change else get_visible_or_404
    proposal = get(request.user, Proposal.objects.all(), pk=pk)
    if change:
        _require_author(request.user, proposal, "cancel load tests of")
    return get_object_or_404(proposal.load_tests, pk=test_pk)


@require_POST
def load_test_cancel(request, pk: int, test_pk: int):
    test = _test_of(request, pk, test_pk, change=True)
    loadtest_services.do_cancel_load_test(test, acting_user=request.user)
    messages.success(request, _("Cancelling the combined load test."))
    return redirect(test.proposal.get_absolute_url() + "#console-load-test")


def status_of(test: LoadTest) -> dict:
    return {
        "id": test.pk,
        "status": test.status,
        "progress": test.progress,
        "failure_code": test.failure_code,
        "failure_params": test.failure_params,
        "result_url": test.get_absolute_url(),
        "finished": test.finished,
    }


def load_test_status(request, pk: int, test_pk: int):
    return JsonResponse(status_of(_test_of(request, pk, test_pk)))


def load_test_result(request, pk: int, test_pk: int):
    test = _test_of(request, pk, test_pk)
    reasons = []
    if test.failure_code == "endpoint_errors":
        for model, failure in test.failure_params.get("models", {}).items():
            failed = Reason(
                "gate.load_test.requests_failed",
                {
                    "model": model,
                    "failed": failure["failed"],
                    "sent": failure["sent"],
                    "errors": ", ".join(f"{c} {n}" for c, n in sorted(failure["errors"].items())),
                },
            )
            # The endpoint's own words, which no catalogue holds.
            detail = (failure["detail"],) if failure.get("detail") else ()
            reasons.append(render_here(then(failed, *detail)))
    elif test.failure_code:
        reasons.append(render_here(failure_reason(test.failure_code, test.failure_params)))
    return render(
        request,
        "proposals/loadtest_result.html",
        {
            "test": test,
            "proposal": test.proposal,
            "result": test.result,
            "plan": test.plan or {},
            "failure_reasons": reasons,
            "chart": {
                "series": test.result.get("series", {}),
                "cards": test.result.get("cards", []),
            },
        },
    )
