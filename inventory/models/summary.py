"""The fleet board's figures per host, kept by a periodic job so that SQL can filter, sort and
page the board (inventory.tasks.refresh_host_summaries; inventory.reports.board).

Each row holds what inventory.reports.fleet.host_figures computed for its host at the moment
of the last run (HostSummaryRun), from the hourly rollups of the two hours before it. A run
covers every host and rewrites only the rows whose figures changed, then stamps itself, in one
transaction: a host's row is that run's figures. Only the figures that come from the rollups
live here; OOMs in 24 h and the collector's health change by the second and are read live
beside them. Rows of a run older than HOST_SUMMARY_STALE_AFTER_S, or of another hour (the
two-hour window holds other buckets), are not used, nor is a host without a row: the board
then computes that host's figures for the request.
"""

from django.db import models


class HostSummary(models.Model):
    host = models.OneToOneField(
        "inventory.Host", on_delete=models.CASCADE, primary_key=True, related_name="board_summary"
    )
    cards = models.PositiveIntegerField()
    largest_headroom_bytes = models.BigIntegerField(null=True)  # None: nothing measured
    headroom_card = models.CharField(max_length=32, blank=True)
    worst_fragmentation = models.FloatField(null=True)
    # green / amber / red; None (not "") when nothing was measured, as the live figure says.
    fragmentation_status = models.CharField(max_length=8, null=True)  # noqa: DJ001
    p99_status = models.CharField(max_length=8)  # green / red / unknown
    p99_detail = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"board summary of host {self.host_id}"


class HostSummaryRun(models.Model):
    """The last run of the job that wrote HostSummary: one row (id 1)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    computed_at = models.DateTimeField()  # the moment the figures are of

    def __str__(self) -> str:
        return f"board summaries of {self.computed_at:%Y-%m-%d %H:%M:%S}"
