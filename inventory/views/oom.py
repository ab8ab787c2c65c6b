"""The OOM history managers review: weekly counts, the changes that landed, a CSV export."""

import csv
import datetime as dt

from django import forms
from django.contrib.auth.decorators import permission_required
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from console.models import AuditEntry
from inventory.models import Event, Host, ServedModel
from inventory.reports import oom_history
from inventory.reports.oom_history import CAUSE_LABELS, DEFAULT_WINDOW_WEEKS, WINDOW_WEEKS

# More lines than this turn the trend chart into a tangle; the table below lists every host.
TREND_HOSTS = 8
EXPORT_CHUNK = 2000


class OomFilterForm(forms.Form):
    weeks = forms.TypedChoiceField(
        label="Window",
        choices=[(weeks, f"Last {weeks} weeks") for weeks in WINDOW_WEEKS],
        coerce=int,
    )
    host = forms.ModelChoiceField(
        queryset=Host.objects.none(), to_field_name="name", required=False, empty_label="All"
    )
    model = forms.ModelChoiceField(
        queryset=ServedModel.objects.none(),
        to_field_name="name",
        required=False,
        empty_label="All",
    )
    cause = forms.ChoiceField(choices=[("", "All"), *CAUSE_LABELS.items()], required=False)

    def __init__(self, user, query):
        data = query.copy()
        data.setdefault("weeks", str(DEFAULT_WINDOW_WEEKS))
        super().__init__(data)
        self.fields["host"].queryset = Host.objects.visible_to(user)
        self.fields["model"].queryset = ServedModel.objects.visible_to(user)

    def selection(self, now: dt.datetime) -> oom_history.Selection:
        """The valid filters; an invalid one is dropped (the form shows why) rather than
        emptying the page."""
        self.is_valid()
        chosen = self.cleaned_data
        start, end = oom_history.window(chosen.get("weeks", DEFAULT_WINDOW_WEEKS), now)
        return oom_history.Selection(
            start=start,
            end=end,
            host=chosen.get("host"),
            served_model=chosen.get("model"),
            cause=chosen.get("cause", ""),
        )


@permission_required("inventory.view_event", raise_exception=True)
def oom_history_page(request):
    form = OomFilterForm(request.user, request.GET)
    selection = form.selection(timezone.now())
    visible_events = Event.objects.visible_to(request.user)
    history = oom_history.weekly_history(
        oom_history.oom_events(visible_events, selection), selection.weeks
    )
    entries = oom_history.change_entries(AuditEntry.objects.visible_to(request.user), selection)
    changes = oom_history.group_changes(entries)
    comparisons = oom_history.compare_changes(changes, visible_events, selection)
    return render(
        request,
        "inventory/oom_history.html",
        {
            "form": form,
            "selection": selection,
            "history": history,
            "changes": list(zip(changes, comparisons, strict=True)),
            "chart_data": _chart_data(history, changes),
            "cause_label": CAUSE_LABELS.get(selection.cause, ""),
            "tables": [
                ("Cause", "weekly-by-cause", history.by_cause),
                ("Host", "weekly-by-host", history.by_host),
                ("Model", "weekly-by-model", history.by_model),
            ],
            "shortest_comparison_days": oom_history.SHORTEST_COMPARISON.days,
            "longest_comparison_days": oom_history.LONGEST_COMPARISON.days,
            "changes_capped": len(entries) == oom_history.CHANGE_ENTRIES_SHOWN,
        },
    )


def _chart_data(history: oom_history.WeeklyHistory, changes: list[oom_history.Change]) -> dict:
    """What static/js/oom_history.js draws: plain lists, no markup."""
    hosts = history.by_host[:TREND_HOSTS]
    rest = history.by_host[TREND_HOSTS:]
    trend = [{"name": series.label, "counts": series.counts} for series in hosts]
    if rest:
        trend.append(
            {
                "name": f"{len(rest)} other hosts",
                "counts": [
                    sum(week) for week in zip(*(series.counts for series in rest), strict=True)
                ],
            }
        )
    return {
        "weeks": [monday.isoformat() for monday in history.weeks],
        "total": history.total,
        "causes": [
            {"key": series.key, "name": series.label, "counts": series.counts}
            for series in history.by_cause
            if series.total
        ],
        "hosts": trend,
        "changes": [
            {
                "at": change.at.astimezone(dt.UTC).isoformat(),
                "host": change.host.name,
                "who": ", ".join(change.actors),
                "what": [_describe(entry) for entry in change.entries],
            }
            for change in changes
        ],
    }


def _describe(entry: AuditEntry) -> str:
    fields = entry.changed_fields
    described = f"{entry.action} {entry.object_repr}"
    if fields:
        described += f" ({', '.join(fields)})"
    if entry.comment:
        described += f": {entry.comment}"
    return described


class _Echo:
    """csv.writer needs a file; a streaming response wants each row back as text."""

    def write(self, row: str) -> str:
        return row


@permission_required("inventory.view_event", raise_exception=True)
def oom_export(request):
    selection = OomFilterForm(request.user, request.GET).selection(timezone.now())
    rows = (
        oom_history.oom_events(Event.objects.visible_to(request.user), selection)
        .order_by("at", "pk")
        .values_list(
            "at",
            "host__name",
            "gpu__index",
            "deployment__served_model__name",
            "cause",
            "cause_explanation",
        )
    )
    writer = csv.writer(_Echo())

    def lines():
        yield writer.writerow(["time", "host", "card", "model", "cause", "explanation"])
        for at, host, card, model, cause, explanation in rows.iterator(chunk_size=EXPORT_CHUNK):
            yield writer.writerow(
                [_iso_utc(at), host, "" if card is None else card, model or "", cause, explanation]
            )

    filename = f"oom-history-{timezone.now().astimezone(dt.UTC):%Y-%m-%d}.csv"
    return StreamingHttpResponse(
        lines(),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def _iso_utc(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
