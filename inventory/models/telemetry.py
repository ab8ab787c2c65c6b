"""Telemetry that the host agents collect: batches, samples, events, collector health.

Sample tables are range-partitioned by day in PostgreSQL (created in migration 0002 with SQL,
so the models below are unmanaged); rollup tables are reached through inventory.timeseries.
"""

from django.conf import settings
from django.db import models
from django.utils import translation
from django.utils.translation import gettext_lazy as _

from console.core.access import VisibleQuerySet


class IngestedBatch(models.Model):
    """One row per batch written: the idempotency key that makes redelivery harmless."""

    batch_id = models.UUIDField(primary_key=True)
    # Every claim writes a group's hundreds of rows: no index of the host alone, which
    # (host, -interval_end) below covers, and, like the sample tables, no constraint checked
    # row by row at each commit (ingest takes the host ids from the hosts it has just read;
    # deleting a host deletes its batches here).
    host = models.ForeignKey(
        "inventory.Host",
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    sampler_id = models.UUIDField()
    seq = models.PositiveBigIntegerField()
    interval_start = models.DateTimeField()
    interval_end = models.DateTimeField()
    received_at = models.DateTimeField(auto_now_add=True)
    rows = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["host", "-interval_end"])]

    def __str__(self) -> str:
        return f"{self.host_id}#{self.seq}"


class PlanDelivery(models.Model):
    """The collection plan last sent to a host: beat sends a plan again only when it changed
    or this one is due for its slow refresh (inventory.tasks.send_collection_plans)."""

    host = models.OneToOneField(
        "inventory.Host",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="plan_delivery",
    )
    # inventory.collection.plan_digest of what was sent; "" when nothing was yet (the host's
    # queue held a message no agent took).
    digest = models.CharField(max_length=64, blank=True)
    sent_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"plan {self.digest[:12] or '-'} sent at {self.sent_at:%Y-%m-%d %H:%M:%S}"


class CollectorStatus(models.Model):
    """A host's collector health, updated by every batch ingested."""

    host = models.OneToOneField(
        "inventory.Host",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="collector_status",
    )
    sampler_id = models.UUIDField(null=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    last_sample_at = models.DateTimeField(null=True)
    last_batch_at = models.DateTimeField(null=True)
    batches = models.PositiveBigIntegerField(default=0)
    missing_batches = models.PositiveBigIntegerField(
        default=0, help_text=_("Sequence gaps: batches the agent sent that never arrived.")
    )
    # Each sampler's range of batches seen and their count (inventory.wire.sequences),
    # from which missing_batches follows.
    sequences = models.JSONField(default=dict, blank=True)
    faults_last_batch = models.PositiveIntegerField(default=0)
    faults_total = models.PositiveBigIntegerField(default=0)
    outbox_depth = models.PositiveIntegerField(default=0)
    outbox_dropped = models.PositiveBigIntegerField(default=0)
    events_dropped = models.PositiveBigIntegerField(default=0)
    mps_servers = models.JSONField(
        default=list,
        blank=True,
        help_text="The MPS servers the agent last saw: server PID, cards, clients.",
    )
    mps_seen_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("collector statuses")

    def __str__(self) -> str:
        return f"collector of {self.host_id}"


class CollectorFault(models.Model):
    """An NVML call or scrape that failed, as the agent aggregated it over one batch."""

    host = models.ForeignKey(
        "inventory.Host", on_delete=models.CASCADE, related_name="collector_faults"
    )
    gpu = models.ForeignKey("inventory.Gpu", null=True, blank=True, on_delete=models.SET_NULL)
    card_index = models.PositiveSmallIntegerField(null=True, blank=True)
    call = models.CharField(max_length=100)
    error = models.CharField(max_length=100)
    message = models.TextField(blank=True)
    count = models.PositiveIntegerField(default=1)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField(db_index=True)
    batch_id = models.UUIDField()

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-last_at"]
        indexes = [models.Index(fields=["host", "-last_at"])]

    def __str__(self) -> str:
        return f"{self.host_id} {self.call}: {self.error}"


class Event(models.Model):
    """Something on-call must see: an Xid, an OOM, an MPS server crash, a lost card."""

    class Kind(models.TextChoices):
        XID = "xid", _("Xid error")
        OOM = "oom", _("Out of memory")
        MPS_SERVER_DOWN = "mps_server_down", _("MPS server down")
        GPU_LOST = "gpu_lost", _("GPU lost")
        PROCESS_RESTART = "process_restart", _("Process restart")
        PROCESS_EXIT = "process_exit", _("Process exit")
        ENGINE_FAULT = "engine_fault", _("Engine fault")
        KV_PRESSURE = "kv_pressure", _("KV cache pressure")

    class Cause(models.TextChoices):
        """OOM triage's causes (inventory.analytics.oom_triage.OomCause), in triage order."""

        TRUE_PEAK = "true_peak", _("True peak")
        ALLOCATOR_RESERVE = "allocator_reserve", _("Allocator reserve")
        FRAGMENTATION = "fragmentation", _("Fragmentation")
        INSUFFICIENT_DATA = "insufficient_data", _("Insufficient data")

    host = models.ForeignKey("inventory.Host", on_delete=models.CASCADE, related_name="events")
    gpu = models.ForeignKey(
        "inventory.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    deployment = models.ForeignKey(
        "inventory.Deployment",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="events",
    )
    kind = models.CharField(max_length=20, choices=Kind, db_index=True)
    at = models.DateTimeField(db_index=True)
    xid = models.PositiveIntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    snapshot = models.JSONField(
        default=dict, blank=True, help_text=_("The card's per-process memory at that moment.")
    )
    cause = models.CharField(
        max_length=20,
        blank=True,
        choices=Cause,
        help_text=_(
            "OOM triage: true_peak, allocator_reserve, fragmentation or insufficient_data."
        ),
    )
    cause_explanation = models.TextField(
        blank=True,
        help_text=_("The triage's explanation in English, for the CSV export and the API."),
    )
    cause_reason = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            "The triage's explanation as a code and figures (inventory.analytics.reasons), "
            "read in the reader's language."
        ),
    )
    batch_id = models.UUIDField()
    position = models.PositiveIntegerField(help_text=_("Index of the event within its batch."))
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["-at"]
        permissions = [("acknowledge_event", "Can acknowledge events")]
        constraints = [
            models.UniqueConstraint(fields=["batch_id", "position"], name="event_once_per_batch")
        ]
        indexes = [models.Index(fields=["host", "kind", "-at"])]

    def __str__(self) -> str:
        # In English whatever the request's language: the audit trail stores it.
        with translation.override(None):
            kind = self.get_kind_display()
        return f"{kind} on {self.host_id} at {self.at:%Y-%m-%d %H:%M}"


class CardSample(models.Model):
    """A card over one agent interval: the interval's peak and last values."""

    pk = models.CompositePrimaryKey("gpu_id", "ts", "batch_id")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.DO_NOTHING, db_constraint=False)
    ts = models.DateTimeField()
    batch_id = models.UUIDField()
    interval_s = models.FloatField()
    samples = models.PositiveSmallIntegerField()
    lost = models.BooleanField(default=False)
    total_bytes = models.BigIntegerField(null=True)
    used_max = models.BigIntegerField(null=True)
    used_last = models.BigIntegerField(null=True)
    reserved_last = models.BigIntegerField(null=True)
    free_min = models.BigIntegerField(null=True)
    free_last = models.BigIntegerField(null=True)
    util_gpu_max = models.SmallIntegerField(null=True)
    util_gpu_last = models.SmallIntegerField(null=True)
    util_memory_max = models.SmallIntegerField(null=True)
    frag_index_max = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "inventory_card_sample"

    def __str__(self) -> str:
        return f"{self.gpu_id}@{self.ts:%Y-%m-%d %H:%M:%S}"


class ProcessSample(models.Model):
    """A process on a card over one agent interval."""

    pk = models.CompositePrimaryKey("gpu_id", "ts", "pid", "batch_id")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.DO_NOTHING, db_constraint=False)
    ts = models.DateTimeField()
    batch_id = models.UUIDField()
    pid = models.IntegerField()
    kind = models.CharField(max_length=8)
    # NULL means NVML could not name the process (a container's PID), unlike an empty name.
    name = models.TextField(null=True)  # noqa: DJ001
    deployment = models.ForeignKey(
        "inventory.Deployment", null=True, on_delete=models.DO_NOTHING, db_constraint=False
    )
    mig_slice = models.ForeignKey(
        "inventory.MigSlice", null=True, on_delete=models.DO_NOTHING, db_constraint=False
    )
    used_max = models.BigIntegerField(null=True)
    used_last = models.BigIntegerField(null=True)
    samples = models.PositiveSmallIntegerField()
    alloc_reserved_last = models.BigIntegerField(null=True)
    alloc_allocated_last = models.BigIntegerField(null=True)
    alloc_inactive_split_last = models.BigIntegerField(null=True)
    alloc_largest_free_last = models.BigIntegerField(null=True)
    frag_index_max = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "inventory_process_sample"

    def __str__(self) -> str:
        return f"{self.gpu_id}/{self.pid}@{self.ts:%Y-%m-%d %H:%M:%S}"


class EngineSample(models.Model):
    """What a deployment's inference engine reported over one agent interval."""

    pk = models.CompositePrimaryKey("deployment_id", "ts", "batch_id")
    deployment = models.ForeignKey(
        "inventory.Deployment", on_delete=models.DO_NOTHING, db_constraint=False
    )
    ts = models.DateTimeField()
    batch_id = models.UUIDField()
    kv_usage_max = models.FloatField(null=True)
    kv_usage_last = models.FloatField(null=True)
    running_max = models.FloatField(null=True)
    running_last = models.FloatField(null=True)
    waiting_max = models.FloatField(null=True)
    waiting_last = models.FloatField(null=True)
    vram_bytes_max = models.BigIntegerField(null=True)
    requests = models.FloatField(null=True)
    # The seconds `requests` were counted over (scrape to scrape), NULL with no count.
    requests_window_s = models.FloatField(null=True)
    latency_p50_s = models.FloatField(null=True)
    latency_p95_s = models.FloatField(null=True)
    latency_p99_s = models.FloatField(null=True)
    # The engine's KV pool as it reported it (vLLM cache_config_info).
    kv_pool_tokens = models.BigIntegerField(null=True)
    kv_pool_bytes = models.BigIntegerField(null=True)
    memory_fraction = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = "inventory_engine_sample"

    def __str__(self) -> str:
        return f"{self.deployment_id}@{self.ts:%Y-%m-%d %H:%M:%S}"


class MigSample(models.Model):
    """A MIG device (GPU instance memory) over one agent interval."""

    pk = models.CompositePrimaryKey("mig_slice_id", "ts", "batch_id")
    mig_slice = models.ForeignKey(
        "inventory.MigSlice", on_delete=models.DO_NOTHING, db_constraint=False
    )
    ts = models.DateTimeField()
    batch_id = models.UUIDField()
    total_bytes = models.BigIntegerField(null=True)
    used_max = models.BigIntegerField(null=True)
    used_last = models.BigIntegerField(null=True)
    free_min = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "inventory_mig_sample"

    def __str__(self) -> str:
        return f"{self.mig_slice_id}@{self.ts:%Y-%m-%d %H:%M:%S}"


class DeadLetter(models.Model):
    """A message ingest could not write, kept with its reason for a person to act on.

    Kept bytes for bytes (it may not even be JSON). Replaying it runs it through ingest again,
    which writes it once (batch ids are unique) or records why it failed again.
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting")
        REPLAYED = "replayed", _("Replayed")
        DISCARDED = "discarded", _("Discarded")

    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    body = models.BinaryField()
    size = models.PositiveIntegerField(help_text=_("Bytes of the message as it arrived."))
    host_name = models.CharField(max_length=100, blank=True, help_text=_("As the batch claims."))
    batch_id = models.CharField(max_length=64, blank=True)
    signature = models.CharField(
        max_length=100, blank=True, help_text=_("As it arrived; a replay checks it again.")
    )
    reason_code = models.CharField(max_length=32, db_index=True)
    reason_path = models.CharField(max_length=200, blank=True)
    reason = models.TextField(help_text=_("In English, for the audit trail and the command line."))
    reason_message = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            "The reason as a message code and figures (inventory.analytics.reasons), read in the "
            "reader's language."
        ),
    )
    replays = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING, db_index=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
        ordering = ["-received_at", "-id"]
        permissions = [("replay_deadletter", "Can replay or discard dead letters")]

    def __str__(self) -> str:
        return f"dead letter {self.pk} ({self.reason_code})"
