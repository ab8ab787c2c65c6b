"""The alerts pages: firing, pending, silenced and history, with per-host and per-rule counts;
acknowledge, silence and unsilence; the rules, edited by approvers."""

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from console.alerts.filters import AlertFilter, silenced_ids
from console.alerts.forms import AcknowledgeForm, RuleForm, SilenceForm
from console.alerts.models import Alert, AlertRule, Silence
from console.alerts.payloads import alert_labels
from console.alerts.services import (
    MATCHABLE_LABELS,
    AlertActionRefused,
    do_acknowledge_alert,
    do_silence,
    do_unsilence,
    do_update_rule,
)
from console.core.access import get_changeable_or_403, get_visible_or_404, require_permission
from console.core.pagination import page_of

TABS = ("firing", "pending", "silenced", "resolved")


@permission_required("alerts.view_alert", raise_exception=True)
def alert_list(request):
    visible = Alert.objects.visible_to(request.user)
    params = request.GET.copy()
    if not params.get("state"):
        params["state"] = "firing"
    alerts = AlertFilter(
        params,
        queryset=visible.select_related("rule", "host", "gpu", "acknowledged_by").order_by(
            "-started_at", "-pk"
        ),
        request=request,
    )
    firing = visible.firing()
    muted = set(silenced_ids(firing))
    counts = {state: visible.filter(state=state).count() for state in ("firing", "pending")}
    counts["silenced"] = len(muted)
    counts["resolved"] = visible.filter(state=Alert.State.RESOLVED).count()
    return render(
        request,
        "alerts/alert_list.html",
        {
            "page": page_of(request, alerts.qs),
            "form": alerts.form,
            "tab": params["state"],
            "tabs": TABS,
            "counts": counts,
            "muted": muted,
            "per_host": firing.values("host__name").annotate(n=Count("pk")).order_by("-n")[:20],
            "per_rule": firing.values("rule__slug", "rule__name")
            .annotate(n=Count("pk"))
            .order_by("-n"),
            "silences": Silence.objects.visible_to(request.user).active(timezone.now()),
            "can_act": request.user.has_perm("alerts.acknowledge_alert"),
            "can_silence": request.user.has_perm("alerts.add_silence"),
        },
    )


def alert_detail(request, pk: int):
    alert = get_visible_or_404(
        request.user,
        Alert.objects.select_related("rule", "host", "gpu", "deployment__served_model"),
        pk=pk,
    )
    return render(
        request,
        "alerts/alert_detail.html",
        {
            "alert": alert,
            "labels": sorted(alert_labels(alert).items()),
            "values": sorted(alert.values.items()),
            "notifications": alert.notifications.order_by("-created_at")[:50],
            "form": AcknowledgeForm(),
            "can_act": request.user.has_perm("alerts.acknowledge_alert"),
            "can_silence": request.user.has_perm("alerts.add_silence"),
        },
    )


@require_POST
def alert_acknowledge(request, pk: int):
    alert = get_changeable_or_403(
        request.user, Alert.objects.select_related("rule"), action="acknowledge", pk=pk
    )
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Say what you are doing about it."))
        return redirect(alert)
    try:
        do_acknowledge_alert(alert, acting_user=request.user, comment=form.cleaned_data["comment"])
        messages.success(request, _("Acknowledged: %(alert)s.") % {"alert": alert})
    except AlertActionRefused as refused:
        messages.info(request, f"{alert}: {refused}.")
    return redirect(alert)


def silence_create(request):
    require_permission(request.user, Silence, "add")
    initial = {"minutes": 60}
    source = request.GET.get("alert", "")
    if source.isdecimal():
        alert = Alert.objects.visible_to(request.user).filter(pk=int(source)).first()
        if alert is not None:
            labels = alert_labels(alert)
            initial["matchers"] = "\n".join(
                f"{key}={labels[key]}"
                for key in ("alertname", "Hostname", "gpu")
                if key in labels and key in MATCHABLE_LABELS
            )
    form = SilenceForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            silence = do_silence(
                acting_user=request.user,
                matchers=form.cleaned_data["matchers"],
                duration=form.duration,
                comment=form.cleaned_data["comment"],
            )
        except ValidationError as error:
            for field, problems in error.message_dict.items():
                form.add_error(field if field in form.fields else None, problems)
        else:
            messages.success(request, _("%(silence)s until %(end)s.") % {
                "silence": silence, "end": f"{silence.ends_at:%Y-%m-%d %H:%M}"})  # fmt: skip
            return redirect("alert-list")
    return render(
        request, "alerts/silence_form.html", {"form": form}, status=400 if form.errors else 200
    )


@require_POST
def silence_end(request, pk: int):
    silence = get_changeable_or_403(request.user, Silence.objects, pk=pk)
    try:
        do_unsilence(silence, acting_user=request.user)
        messages.success(request, _("%(silence)s ended.") % {"silence": silence})
    except AlertActionRefused as refused:
        messages.info(request, f"{silence}: {refused}.")
    return redirect("alert-list")


@permission_required("alerts.view_alertrule", raise_exception=True)
def rule_list(request):
    return render(
        request,
        "alerts/rule_list.html",
        {
            "rules": AlertRule.objects.visible_to(request.user).select_related("host"),
            "can_edit": request.user.has_perm("alerts.change_alertrule"),
        },
    )


def rule_edit(request, slug: str):
    rule = get_changeable_or_403(request.user, AlertRule.objects, slug=slug)
    form = RuleForm(request.POST or None, instance=rule)
    if request.method == "POST" and form.is_valid():
        try:
            rule = do_update_rule(
                AlertRule.objects.get(pk=rule.pk),
                acting_user=request.user,
                comment=form.cleaned_data["comment"],
                **form.rule_fields(),
            )
        except ValidationError as error:
            for field, problems in error.message_dict.items():
                form.add_error(field if field in form.fields else None, problems)
        else:
            messages.success(request, _("Saved %(rule)s.") % {"rule": rule})
            return redirect("alert-rule-list")
    status = 400 if form.errors else 200
    return render(request, "alerts/rule_form.html", {"form": form, "rule": rule}, status=status)
