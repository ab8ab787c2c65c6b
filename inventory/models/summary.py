"""The fleet board's figures per host, kept by a periodic job so that SQL can filter, sort and
page the board (inventory.tasks.refresh_host_summaries; inventory.reports.board).

Each row holds what inventory.reports.fleet.host_figures computed for its host at
`computed_at`, from the hourly rollups of the two hours before it. Only the figures that come
from those rollups live here; OOMs in 24 h and the collector's health change by the second and
are read live beside them. A row older than HOST_SUMMARY_STALE_AFTER_S, or computed in
another hour (the two-hour window holds other buckets), is not used: the board then computes
its figures live, as it did before the table existed.
"""

from django.db import models


class HostSummary(models.Model):
    host = models.OneToOneField(
        "inventory.Host", on_delete=models.CASCADE, primary_key=True, related_name="board_summary"
    )
    computed_at = models.DateTimeField()
    cards = models.PositiveIntegerField()
    largest_headroom_bytes = models.BigIntegerField(null=True)  # None: nothing measured
    headroom_card = models.CharField(max_length=32, blank=True)
    worst_fragmentation = models.FloatField(null=True)
    # green / amber / red; None (not "") when nothing was measured, as the live figure says.
    fragmentation_status = models.CharField(max_length=8, null=True)  # noqa: DJ001
    p99_status = models.CharField(max_length=8)  # green / red / unknown
    p99_detail = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"board summary of host {self.host_id} at {self.computed_at:%H:%M:%S}"
