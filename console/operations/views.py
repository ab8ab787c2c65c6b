"""The host's operations page and its actions: what was asked of the agent, what the
console's own operations did, and the buttons of those allowed to press them.

Managers see everything here and can press nothing; on-call asks for actions; approvers
approve them (never their own), sign standing policies, clear refusals and decide plans.
"""

from __future__ import annotations

import plotly.graph_objects as go
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from console.core.access import get_changeable_or_403, get_visible_or_404, require_permission
from console.core.chart_tables import chart_table
from console.operations import off_peak, services
from console.operations.models import (
    DefragPlan,
    DegradationRun,
    HostAction,
    MpsRecovery,
    StandingPolicy,
)
from inventory.models import CardRefusal, Deployment, Host
from inventory.telemetry import host_actions as ha

# What the ask form calls each action the agent knows (the agent's names stay in the value).
ACTION_LABELS = {
    ha.RESTART: _("Restart a deployment"),
    ha.STOP: _("Stop a deployment"),
    ha.START: _("Start a deployment"),
    ha.RELOAD_WITH: _("Reload a deployment with new settings"),
    ha.MPS_RESTART: _("Restart the MPS server"),
}

PARAMETER_FIELDS = {"kv_bytes": int, "mem_fraction": float, "card_index": int}


def _page(request, host: Host, status: int = 200, errors=()):
    user = request.user
    visible = {
        "actions": HostAction.objects.visible_to(user)
        .filter(host=host)
        .select_related("deployment", "requested_by", "approved_by", "policy")[:50],
        "policies": StandingPolicy.objects.visible_to(user)
        .filter(host=host)
        .select_related("signed_by", "revoked_by")[:20],
        "refusals": CardRefusal.objects.visible_to(user)
        .filter(gpu__host=host)
        .select_related("gpu", "cleared_by")[:20],
        "degradations": DegradationRun.objects.visible_to(user)
        .filter(host=host)
        .select_related("gpu")
        .prefetch_related("actions")[:20],
        "recoveries": MpsRecovery.objects.visible_to(user)
        .filter(host=host)
        .select_related("gpu")
        .prefetch_related("actions")[:20],
        "plans": DefragPlan.objects.visible_to(user)
        .filter(host=host)
        .select_related("decided_by")
        .prefetch_related("reloads__deployment", "reloads__gpu")[:10],
    }
    return render(
        request,
        "operations/host_operations.html",
        {
            "host": host,
            **visible,
            "deployments": host.deployments.exclude(status=Deployment.Status.STOPPED)
            .exclude(runtime_name="")
            .select_related("served_model"),
            "action_names": [(name, ACTION_LABELS[name]) for name in ha.ACTIONS],
            "policy_kinds": StandingPolicy.Kind.choices,
            "can_ask": user.has_perm("operations.add_hostaction"),
            "can_approve": user.has_perm("operations.approve_hostaction"),
            "can_sign": user.has_perm("operations.sign_standingpolicy"),
            "can_decide_plans": user.has_perm("operations.approve_defragplan"),
            "fragmentation_chart": _fragmentation_chart(visible["plans"]),
            "errors": errors,
        },
        status=status,
    )


def _fragmentation_chart(plans) -> dict | None:
    """Fragmentation before and after each reload measured: the Plotly figure (JSON) and its
    text table, both from the same reloads."""
    reloads = [r for plan in plans for r in plan.reloads.all() if r.fragmentation_after is not None]
    if not reloads:
        return None
    # Finished when, in the reader's zone (named on the axis and in the table).
    labels = [
        f"{r.deployment.runtime_name} {timezone.localtime(r.finished_at):%m-%d %H:%M}"
        for r in reloads
    ]
    reload_label = _("reload (time in %(zone)s)") % {"zone": timezone.get_current_timezone_name()}
    title = str(_("Off-peak reloads: fragmentation before and after"))
    before = [r.fragmentation_before for r in reloads]
    after = [r.fragmentation_after for r in reloads]
    figure = go.Figure(
        [
            go.Bar(name=str(_("before")), x=labels, y=before),
            go.Bar(name=str(_("after")), x=labels, y=after),
        ]
    )
    figure.update_layout(
        barmode="group",
        height=280,
        margin={"l": 40, "r": 10, "t": 30, "b": 40},
        xaxis={"title": reload_label},
        yaxis={"title": str(_("fragmentation index")), "range": [0, 1]},
        title=title,
    )
    return {
        "figure": figure.to_json(),
        "table": chart_table(
            "fragmentation-chart-table",
            title,
            [(reload_label, False), (str(_("before")), True), (str(_("after")), True)],
            zip(labels, map(_index, before), map(_index, after), strict=True),
        ),
    }


def _index(value: float | None) -> str:
    # As the console's chart tables print a fragmentation index (static/js/charts.js).
    return "—" if value is None else f"{value:.3f}"


def host_operations(request, name: str):
    host = get_visible_or_404(request.user, Host.objects, name=name)
    require_permission(request.user, HostAction, "view")
    return _page(request, host)


def _parameters(post) -> dict:
    params = {}
    for field, kind in PARAMETER_FIELDS.items():
        raw = (post.get(field) or "").strip()
        if not raw:
            continue
        try:
            params[field] = kind(raw)
        except ValueError:
            raise ValidationError({field: f"{field} must be a number"}) from None
    return params


def _messages_of(error: ValidationError) -> list[str]:
    if hasattr(error, "message_dict"):
        return [f"{k}: {' '.join(v)}" for k, v in error.message_dict.items()]
    return list(error.messages)


@require_POST
def request_action(request, name: str):
    host = get_visible_or_404(request.user, Host.objects, name=name)
    require_permission(request.user, HostAction, "add")
    deployment = None
    if request.POST.get("deployment"):
        chosen = request.POST["deployment"]
        deployment = Deployment.objects.filter(
            host=host, pk=chosen if chosen.isdecimal() else 0
        ).first()
        if deployment is None:
            return _page(request, host, 400, ["deployment: no such deployment on this host"])
    try:
        action = services.do_request_action(
            acting_user=request.user,
            host=host,
            action=request.POST.get("action", ""),
            deployment=deployment,
            params=_parameters(request.POST),
        )
    except ValidationError as error:
        return _page(request, host, 400, _messages_of(error))
    messages.success(request, _("%(action)s asked: it waits for an approver.") % {"action": action})
    return redirect("host-operations", name=host.name)


def _decide_action(request, pk: int, approve: bool):
    action = get_changeable_or_403(
        request.user, HostAction.objects.select_related("host"), action="approve", pk=pk
    )
    try:
        if approve:
            services.do_approve_action(action, acting_user=request.user)
            messages.success(request, _("Approved: the request is on its way to the agent."))
        else:
            services.do_reject_action(action, acting_user=request.user)
            messages.success(request, _("Rejected."))
    except services.OperationError as error:
        messages.error(request, str(error))
    return redirect("host-operations", name=action.host.name)


@require_POST
def approve_action(request, pk: int):
    return _decide_action(request, pk, approve=True)


@require_POST
def reject_action(request, pk: int):
    return _decide_action(request, pk, approve=False)


_POLICY_PARAMS = {"kv_floor_fraction": float, "kv_floor_bytes": int}


@require_POST
def sign_policy(request, name: str):
    host = get_visible_or_404(request.user, Host.objects, name=name)
    require_permission(request.user, StandingPolicy, "sign")
    params = {}
    for field, kind in _POLICY_PARAMS.items():
        raw = (request.POST.get(field) or "").strip()
        if raw:
            try:
                params[field] = kind(raw)
            except ValueError:
                return _page(request, host, 400, [f"{field} must be a number"])
    fraction = params.get("kv_floor_fraction")
    if fraction is not None and not 0 <= fraction < 1:
        return _page(request, host, 400, ["kv_floor_fraction must be within 0..1"])
    if "allow_evict" in request.POST:
        params["allow_evict"] = request.POST.get("allow_evict") == "on"
    try:
        services.do_sign_policy(
            acting_user=request.user, host=host, kind=request.POST.get("kind", ""), params=params
        )
    except ValidationError as error:
        return _page(request, host, 400, _messages_of(error))
    messages.success(request, _("Standing policy signed."))
    return redirect("host-operations", name=host.name)


@require_POST
def revoke_policy(request, pk: int):
    policy = get_changeable_or_403(
        request.user, StandingPolicy.objects.select_related("host"), action="sign", pk=pk
    )
    services.do_revoke_policy(policy, acting_user=request.user)
    messages.success(request, _("Standing policy revoked."))
    return redirect("host-operations", name=policy.host.name)


@require_POST
def clear_refusal(request, pk: int):
    refusal = get_visible_or_404(
        request.user, CardRefusal.objects.select_related("gpu__host"), pk=pk
    )
    require_permission(request.user, HostAction, "approve")
    services.do_clear_refusal(refusal, acting_user=request.user)
    messages.success(request, _("%(card)s takes new loads again.") % {"card": refusal.gpu})
    return redirect("host-operations", name=refusal.gpu.host.name)


@require_POST
def decide_plan(request, pk: int):
    plan = get_changeable_or_403(
        request.user, DefragPlan.objects.select_related("host"), action="approve", pk=pk
    )
    approve = request.POST.get("decision") == "approve"
    try:
        off_peak.do_decide_plan(plan, acting_user=request.user, approve=approve)
    except services.OperationError as error:
        messages.error(request, str(error))
    return redirect("host-operations", name=plan.host.name)
