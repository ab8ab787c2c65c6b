"""OOM history for managers: OOMs per ISO week, the placement changes that landed in between,
and OOMs per day before vs after each change.

Counting happens in PostgreSQL (one GROUP BY per breakdown, one conditional aggregate for all
comparisons); Python only reshapes aggregated rows, whose number is bounded by weeks x
categories, never by events. Weeks are ISO weeks starting Monday 00:00 UTC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import TruncWeek
from django.utils.translation import gettext_lazy as _

from console.core.models import AuditEntry
from inventory.analytics.oom_triage import OomCause
from inventory.models import Event, Host, IngestedBatch, ServedModel

WINDOW_WEEKS = (4, 12, 26, 52)
DEFAULT_WINDOW_WEEKS = 12
WEEK = dt.timedelta(weeks=1)

CAUSE_LABELS = {
    OomCause.TRUE_PEAK.value: _("True peak"),
    OomCause.ALLOCATOR_RESERVE.value: _("Allocator reserve"),
    OomCause.FRAGMENTATION.value: _("Fragmentation"),
    OomCause.INSUFFICIENT_DATA.value: _("Insufficient data"),
}
# Events stored before triage ran at ingest carry no cause.
UNTRIAGED_LABEL = _("Not triaged")
UNATTRIBUTED_LABEL = _("No deployment recorded")

# Placement and isolation changes: admin and service edits of deployments, applied proposals.
CHANGE_ACTION_PREFIXES = ("deployment.", "proposal.apply")
# Only the newest rows: a fleet-wide year can hold thousands of routine edits.
CHANGE_ENTRIES_SHOWN = 200

LONGEST_COMPARISON = dt.timedelta(days=7)
# Under a day either side, one OOM more or less swings the daily rate too far to mean anything.
SHORTEST_COMPARISON = dt.timedelta(days=1)


@dataclass(frozen=True)
class Selection:
    """What the manager asked to see: whole ISO weeks up to now, optionally narrowed."""

    start: dt.datetime
    end: dt.datetime
    host: Host | None = None
    served_model: ServedModel | None = None
    cause: str = ""

    @property
    def weeks(self) -> list[dt.date]:
        """The Monday of every week in the window, oldest first."""
        mondays, monday = [], self.start.date()
        while dt.datetime.combine(monday, dt.time(), tzinfo=dt.UTC) < self.end:
            mondays.append(monday)
            monday += WEEK
        return mondays


def window(weeks: int, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The last `weeks` ISO weeks, the current one (so far) included: a Monday 00:00 UTC to now.

    Starting on a week boundary keeps every week but the current one whole, so weekly counts
    compare like with like.
    """
    today = now.astimezone(dt.UTC).date()
    monday = today - dt.timedelta(days=today.weekday()) - (weeks - 1) * WEEK
    return dt.datetime.combine(monday, dt.time(), tzinfo=dt.UTC), now


def _narrowed(events: QuerySet, selection: Selection) -> QuerySet:
    """OOMs of the selected model and cause, at any time and on any host."""
    ooms = events.filter(kind=Event.Kind.OOM)
    if selection.served_model is not None:
        ooms = ooms.filter(deployment__served_model=selection.served_model)
    if selection.cause:
        ooms = ooms.filter(cause=selection.cause)
    return ooms


def oom_events(events: QuerySet, selection: Selection) -> QuerySet:
    """The OOMs the page and the CSV export show."""
    ooms = _narrowed(events, selection).filter(at__gte=selection.start, at__lt=selection.end)
    if selection.host is not None:
        ooms = ooms.filter(host=selection.host)
    return ooms


@dataclass(frozen=True)
class Series:
    """One host's, model's or cause's OOMs, one count per week of the window."""

    key: str
    label: str
    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True)
class WeeklyHistory:
    weeks: list[dt.date]
    by_cause: list[Series]
    by_host: list[Series]
    by_model: list[Series]

    @property
    def total(self) -> int:
        return sum(series.total for series in self.by_cause)


def _weekly_counts(ooms: QuerySet, field: str, weeks: list[dt.date]) -> dict[str, list[int]]:
    """OOMs per (value of `field`, week), counted by the database."""
    rows = (
        ooms.order_by()
        .annotate(week=TruncWeek("at", tzinfo=dt.UTC))
        .values(field, "week")
        .annotate(count=Count("pk"))
        .values_list(field, "week", "count")
    )
    position = {monday: index for index, monday in enumerate(weeks)}
    counts: dict[str, list[int]] = {}
    for key, week, count in rows:
        counts.setdefault(key or "", [0] * len(weeks))[position[week.date()]] = count
    return counts


def busiest(series: list[Series], shown: int, label_of_rest) -> list[Series]:
    """The first `shown` of `series` (largest first), the others summed into one last series
    labelled `label_of_rest(how many)`: thousands of hosts are read by their top and their
    total, and every week's column still adds up to the window's OOMs."""
    if len(series) <= shown:
        return series
    rest = series[shown:]
    summed = tuple(sum(week) for week in zip(*(one.counts for one in rest), strict=True))
    return [*series[:shown], Series("", label_of_rest(len(rest)), summed)]


def _largest_first(counts: dict[str, list[int]], label_of) -> list[Series]:
    series = [Series(key, label_of(key), tuple(weekly)) for key, weekly in counts.items()]
    return sorted(series, key=lambda one: (-one.total, one.label))


def weekly_history(ooms: QuerySet, weeks: list[dt.date]) -> WeeklyHistory:
    """OOMs per week by cause (every cause, in triage order), by host and by served model."""
    by_cause = _weekly_counts(ooms, "cause", weeks)
    causes = [
        Series(cause, label, tuple(by_cause.pop(cause, [0] * len(weeks))))
        for cause, label in CAUSE_LABELS.items()
    ]
    causes += _largest_first(by_cause, lambda key: CAUSE_LABELS.get(key) or UNTRIAGED_LABEL)
    return WeeklyHistory(
        weeks=weeks,
        by_cause=causes,
        by_host=_largest_first(_weekly_counts(ooms, "host__name", weeks), str),
        by_model=_largest_first(
            _weekly_counts(ooms, "deployment__served_model__name", weeks),
            lambda key: key or UNATTRIBUTED_LABEL,
        ),
    )


@dataclass(frozen=True)
class Change:
    """Audit rows of one change id on one host: one marker, one before/after comparison."""

    host: Host
    entries: tuple[AuditEntry, ...]  # oldest first

    @property
    def at(self) -> dt.datetime:
        return self.entries[0].at

    @property
    def actors(self) -> list[str]:
        return sorted({entry.actor_name for entry in self.entries})


def change_entries(audit_entries: QuerySet, selection: Selection) -> list[AuditEntry]:
    """The newest placement and isolation changes in the window, on the selected host or all."""
    is_change = Q()
    for prefix in CHANGE_ACTION_PREFIXES:
        is_change |= Q(action__startswith=prefix)
    entries = audit_entries.filter(
        is_change, host__isnull=False, at__gte=selection.start, at__lt=selection.end
    )
    if selection.host is not None:
        entries = entries.filter(host=selection.host)
    return list(entries.select_related("host").order_by("-at", "-pk")[:CHANGE_ENTRIES_SHOWN])


def group_changes(entries: Iterable[AuditEntry]) -> list[Change]:
    """Rows of one change id on one host become one change; newest first.

    A move between hosts is one change id with rows on both: each host gets its marker.
    """
    changes: dict[tuple, list[AuditEntry]] = {}
    for entry in sorted(entries, key=lambda entry: (entry.at, entry.pk)):
        changes.setdefault((entry.change_id, entry.host_id), []).append(entry)
    grouped = [Change(host=rows[0].host, entries=tuple(rows)) for rows in changes.values()]
    return sorted(grouped, key=lambda change: change.at, reverse=True)


@dataclass(frozen=True)
class BeforeAfter:
    """OOMs on a host in the `span` before a change and in the `span` after it."""

    span: dt.timedelta
    before: int
    after: int

    @property
    def days(self) -> float:
        return self.span / dt.timedelta(days=1)

    @property
    def before_per_day(self) -> float:
        return self.before / self.days

    @property
    def after_per_day(self) -> float:
        return self.after / self.days


def comparison_span(
    change_at: dt.datetime,
    covered_from: dt.datetime | None,
    covered_until: dt.datetime | None,
) -> dt.timedelta | None:
    """N, the stretch compared on each side of a change: min(7 days, time available).

    Time available is what the host's telemetry covers on the *shorter* side: from its first
    batch to the change, and from the change to its latest batch. Counting OOMs where nothing
    was collected would read as "no OOMs", so a host that stopped reporting after a change
    must not look cured. Both sides get the same N so the daily rates compare like with like.
    None when either side has less than a day, or the host has no telemetry at all.
    """
    if covered_from is None or covered_until is None:
        return None
    span = min(LONGEST_COMPARISON, change_at - covered_from, covered_until - change_at)
    return span if span >= SHORTEST_COMPARISON else None


def _telemetry_coverage(host_ids: set[int]) -> dict[int, tuple[dt.datetime, dt.datetime]]:
    """Each host's first batch start and latest batch end, read off the (host, end) index."""
    batches = IngestedBatch.objects.filter(host=OuterRef("pk"))
    hosts = Host.objects.filter(pk__in=host_ids).annotate(
        covered_from=Subquery(batches.order_by("interval_end").values("interval_start")[:1]),
        covered_until=Subquery(batches.order_by("-interval_end").values("interval_end")[:1]),
    )
    return {
        pk: (start, end)
        for pk, start, end in hosts.values_list("pk", "covered_from", "covered_until")
    }


def compare_changes(
    changes: Sequence[Change], events: QuerySet, selection: Selection
) -> list[BeforeAfter | None]:
    """OOMs per day before vs after each change on its host, in the selected model and cause.

    One query counts every comparison (a conditional COUNT per side per change); the window
    does not cut the comparison short, the host's telemetry does.
    """
    coverage = _telemetry_coverage({change.host.pk for change in changes})
    spans = [
        comparison_span(change.at, *coverage.get(change.host.pk, (None, None)))
        for change in changes
    ]
    counted = [
        (index, change, span)
        for index, (change, span) in enumerate(zip(changes, spans, strict=True))
        if span is not None
    ]
    if not counted:
        return [None] * len(changes)
    sides = {}
    for index, change, span in counted:
        on_host = Q(host_id=change.host.pk)
        sides[f"before_{index}"] = Count(
            "pk", filter=on_host & Q(at__gte=change.at - span, at__lt=change.at)
        )
        sides[f"after_{index}"] = Count(
            "pk", filter=on_host & Q(at__gte=change.at, at__lt=change.at + span)
        )
    nearby = _narrowed(events, selection).filter(
        host_id__in={change.host.pk for _, change, _ in counted},
        at__gte=min(change.at - span for _, change, span in counted),
        at__lt=max(change.at + span for _, change, span in counted),
    )
    counts = nearby.order_by().aggregate(**sides)
    comparisons: list[BeforeAfter | None] = [None] * len(changes)
    for index, _change, span in counted:
        comparisons[index] = BeforeAfter(
            span=span, before=counts[f"before_{index}"], after=counts[f"after_{index}"]
        )
    return comparisons
