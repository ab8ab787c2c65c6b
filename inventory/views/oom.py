"""The OOM history managers review: weekly counts, the changes that landed, a CSV export."""

import csv
import datetime as dt

from django.contrib.auth.decorators import permission_required
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from console.core.models import AuditEntry
from inventory.filters import OomEventFilter
from inventory.models import Event
from inventory.reports import oom_history
from inventory.reports.latency import latency_lines
from inventory.reports.oom_history import CAUSE_LABELS

# More lines than this turn the trend chart into a tangle; the others are summed in one line.
TREND_HOSTS = 8
# Rows of the by-host and by-model tables: at 10,000 hosts a table of every host with an OOM
# was most of a 5.6 MB page. The others are summed in a last row; the CSV lists every OOM.
TABLE_ROWS = 50
EXPORT_CHUNK = 2000


@permission_required("inventory.view_event", raise_exception=True)
def oom_history_page(request):
    visible_events = Event.objects.visible_to(request.user)
    ooms = OomEventFilter(request.GET, queryset=visible_events, request=request)
    selection = ooms.selection
    history = oom_history.weekly_history(ooms.qs, selection.weeks)
    entries = oom_history.change_entries(AuditEntry.objects.visible_to(request.user), selection)
    changes = oom_history.group_changes(entries)
    comparisons = oom_history.compare_changes(changes, visible_events, selection)
    return render(
        request,
        "inventory/oom_history.html",
        {
            "form": ooms.form,
            "selection": selection,
            "history": history,
            "changes": list(zip(changes, comparisons, strict=True)),
            "chart_data": _chart_data(history, changes),
            "cause_label": CAUSE_LABELS.get(selection.cause, ""),
            "tables": [
                (_("Cause"), "weekly-by-cause", history.by_cause),
                (
                    _("Host"),
                    "weekly-by-host",
                    oom_history.busiest(history.by_host, TABLE_ROWS, _other_hosts),
                ),
                (
                    _("Model"),
                    "weekly-by-model",
                    oom_history.busiest(history.by_model, TABLE_ROWS, _other_models),
                ),
            ],
            "table_rows": TABLE_ROWS,
            "shortest_comparison_days": oom_history.SHORTEST_COMPARISON.days,
            "longest_comparison_days": oom_history.LONGEST_COMPARISON.days,
            "changes_capped": len(entries) == oom_history.CHANGE_ENTRIES_SHOWN,
            # The other half of the field report's result: the host's P99 across its change.
            "latency": _latency(selection),
            "latency_zone": timezone.get_current_timezone_name(),
        },
    )


def _latency(selection: oom_history.Selection) -> dict | None:
    if selection.host is None:
        return None
    return latency_lines(selection.host, selection.start, selection.end, 3600)


def _chart_data(history: oom_history.WeeklyHistory, changes: list[oom_history.Change]) -> dict:
    """What static/js/oom_history.js draws: plain lists, no markup."""
    trend = [
        {"name": series.label, "counts": series.counts}
        for series in oom_history.busiest(history.by_host, TREND_HOSTS, _other_hosts)
    ]
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


def _other_hosts(count: int) -> str:
    return ngettext("%(count)d other host", "%(count)d other hosts", count) % {"count": count}


def _other_models(count: int) -> str:
    return ngettext("%(count)d other model", "%(count)d other models", count) % {"count": count}


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
    ooms = OomEventFilter(
        request.GET, queryset=Event.objects.visible_to(request.user), request=request
    )
    rows = ooms.qs.order_by("at", "pk").values_list(
        "at",
        "host__name",
        "gpu__index",
        "deployment__served_model__name",
        "cause",
        "cause_explanation",
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
