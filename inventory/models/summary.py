"""The fleet board's figures per host, kept by a periodic job so that SQL can filter, sort and
page the board (inventory.tasks.refresh_host_summaries; inventory.reports.board).

Each row holds what inventory.reports.fleet.host_figures computed for its host at the moment
of the last run of its set (HostSummaryRun), from the hourly rollups of a two-hour window: a
set is that of the window of one hour (its `hour`: that hour's and the one before). A run
covers every host and rewrites only the rows whose figures changed, then stamps its set, in
one transaction: a host's row is that run's figures. In the last moments of an hour a run
also writes the next hour's set, so the board has it at the hour's turn instead of computing
every host until the next run. Only the figures that come from the rollups live here; OOMs in
24 h and the collector's health change by the second and are read live beside them. The rows
of a set whose run is older than HOST_SUMMARY_STALE_AFTER_S, or of another hour's set, are not
used, nor is a host without a row: the board then computes that host's figures for the
request.
"""

from django.db import models


class HostSummary(models.Model):
    host = models.ForeignKey(
        "inventory.Host", on_delete=models.CASCADE, related_name="board_summaries"
    )
    hour = models.DateTimeField()  # the set: the hour whose two-hour window the figures are of
    cards = models.PositiveIntegerField()
    largest_headroom_bytes = models.BigIntegerField(null=True)  # None: nothing measured
    headroom_card = models.CharField(max_length=32, blank=True)
    worst_fragmentation = models.FloatField(null=True)
    # green / amber / red; None (not "") when nothing was measured, as the live figure says.
    fragmentation_status = models.CharField(max_length=8, null=True)  # noqa: DJ001
    p99_status = models.CharField(max_length=8)  # green / red / unknown
    p99_detail = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["host", "hour"], name="host_summary_once_a_set")
        ]

    def __str__(self) -> str:
        return f"board summary of host {self.host_id} for {self.hour:%Y-%m-%d %H:00}"


class HostSummaryRun(models.Model):
    """The last run that wrote a set of HostSummary: one row a set."""

    hour = models.DateTimeField(primary_key=True)  # the set
    computed_at = models.DateTimeField()  # the moment the figures are of

    def __str__(self) -> str:
        return f"board summaries for {self.hour:%H:00} of {self.computed_at:%Y-%m-%d %H:%M:%S}"
