"""Host operations: the actions asked of hosts, the policies that allow them, and what the
console's own operations (degradation, MPS recovery, off-peak reloads) did with them."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from console.core.access import VisibleQuerySet
from inventory.telemetry import host_actions as ha


class StandingPolicy(models.Model):
    """An approver's standing permission for the console to act on a host by itself."""

    class Kind(models.TextChoices):
        DEGRADATION = "degradation", _("Degradation (shrink KV, evict, refuse)")
        MPS_RESTART = "mps_restart", _("MPS server restart")
        DEFRAG = "defrag", _("Off-peak reloads")

    host = models.ForeignKey("inventory.Host", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind)
    params = models.JSONField(default=dict, blank=True)
    signed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    signed_at = models.DateTimeField(auto_now_add=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "standing policies"
        permissions = [("sign_standingpolicy", "Can sign or revoke standing policies")]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "kind"],
                condition=Q(revoked_at__isnull=True),
                name="one_standing_policy_per_kind",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.host_id}"


class HostAction(models.Model):
    """One request to a host's agent, from the console's ask to the agent's outcome."""

    class State(models.TextChoices):
        AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
        SENT = "sent", _("Sent")
        SUCCEEDED = ha.SUCCEEDED, _("Succeeded")
        FAILED = ha.FAILED, _("Failed")
        TIMED_OUT = ha.TIMED_OUT, _("Timed out")
        REFUSED = ha.REFUSED, _("Refused by the agent")
        REJECTED = "rejected", _("Rejected by an approver")

    class Origin(models.TextChoices):
        MANUAL = "manual", _("Asked by a person")
        DEGRADATION = "degradation", _("Degradation")
        MPS = "mps", _("MPS recovery")
        DEFRAG = "defrag", _("Off-peak reload")

    FINAL = (
        State.SUCCEEDED,
        State.FAILED,
        State.TIMED_OUT,
        State.REFUSED,
        State.REJECTED,
    )

    request_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    host = models.ForeignKey("inventory.Host", on_delete=models.CASCADE, related_name="+")
    deployment = models.ForeignKey(
        "inventory.Deployment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    gpu = models.ForeignKey(
        "inventory.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=16, choices=[(a, a) for a in ha.ACTIONS])
    params = models.JSONField(default=dict, blank=True)
    origin = models.CharField(max_length=12, choices=Origin, default=Origin.MANUAL)
    state = models.CharField(max_length=20, choices=State, db_index=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    policy = models.ForeignKey(
        StandingPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="actions"
    )
    proposal = models.ForeignKey(
        "proposals.Proposal", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    reason_code = models.CharField(max_length=32, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    output_tail = models.TextField(blank=True)
    deliveries = models.PositiveIntegerField(
        default=0, help_text="Outcomes the agent reported; more than one is a redelivery."
    )

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("approve_hostaction", "Can approve host actions")]

    def __str__(self) -> str:
        target = self.deployment.runtime_name if self.deployment else f"card {self.card_index}"
        return f"{self.action} {target} on {self.host}"

    @property
    def card_index(self):
        return self.params.get("card_index")

    @property
    def finished(self) -> bool:
        return self.state in self.FINAL


class DegradationRun(models.Model):
    """A card past its limit: the plan computed, what was asked, memory before and after."""

    class State(models.TextChoices):
        ACTING = "acting", _("Acting")
        AWAITING_APPROVAL = "awaiting_approval", _("Awaiting approval")
        RECOVERED = "recovered", _("Below the limit again")
        NOT_RECOVERED = "not_recovered", _("Still over the limit")

    class Trigger(models.TextChoices):
        USAGE = "usage", _("Memory use over the limit")
        OOM = "oom", _("Out of memory")

    host = models.ForeignKey("inventory.Host", on_delete=models.CASCADE, related_name="+")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.CASCADE, related_name="+")
    trigger = models.CharField(max_length=8, choices=Trigger)
    event = models.OneToOneField(
        "inventory.Event", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField(auto_now_add=True)
    total_bytes = models.BigIntegerField()
    used_before_bytes = models.BigIntegerField()
    used_after_bytes = models.BigIntegerField(null=True, blank=True)
    limit_fraction = models.FloatField()
    plan = models.JSONField(default=list)
    projected_after_bytes = models.BigIntegerField()
    state = models.CharField(max_length=20, choices=State, db_index=True)
    actions = models.ManyToManyField(HostAction, blank=True, related_name="+")
    proposal = models.ForeignKey(
        "proposals.Proposal", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    settled_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"degradation of {self.gpu} at {self.started_at:%Y-%m-%d %H:%M}"


class MpsRecovery(models.Model):
    """An MPS server crash on a card, the restarts asked, and each client's return."""

    class State(models.TextChoices):
        RESTARTING = "restarting", _("Restarting the server")
        AWAITING_CLIENTS = "awaiting_clients", _("Waiting for the clients")
        RECOVERED = "recovered", _("Clients back")
        CAPPED = "capped", _("Restart cap reached")
        NO_POLICY = "no_policy", _("No standing policy: left to on-call")

    host = models.ForeignKey("inventory.Host", on_delete=models.CASCADE, related_name="+")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.CASCADE, related_name="+")
    event = models.OneToOneField("inventory.Event", on_delete=models.CASCADE, related_name="+")
    crashed_at = models.DateTimeField()
    state = models.CharField(max_length=20, choices=State, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    actions = models.ManyToManyField(HostAction, blank=True, related_name="+")
    # runtime name -> {"deployment_id", "pid" before the crash, "returned_pid", "returned_at"}
    clients = models.JSONField(default=dict)
    recovered_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-crashed_at", "-id"]
        verbose_name_plural = "MPS recoveries"

    def __str__(self) -> str:
        return f"MPS crash on {self.gpu} at {self.crashed_at:%Y-%m-%d %H:%M}"


class DefragPlan(models.Model):
    """Reloads proposed for a host's next traffic trough, one deployment at a time."""

    class State(models.TextChoices):
        PROPOSED = "proposed", _("Proposed")
        APPROVED = "approved", _("Approved")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        REJECTED = "rejected", _("Rejected")
        MISSED = "missed", _("Window missed")

    host = models.ForeignKey("inventory.Host", on_delete=models.CASCADE, related_name="+")
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State, default=State.PROPOSED, db_index=True)
    # The trough found (weekday, hour, mean load) and the thresholds the candidates crossed.
    basis = models.JSONField(default=dict)
    estimated_bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-window_start", "-id"]
        permissions = [("approve_defragplan", "Can approve off-peak reload plans")]

    def __str__(self) -> str:
        return f"reloads on {self.host} at {self.window_start:%Y-%m-%d %H:%M}"


class DefragReload(models.Model):
    """One deployment's reload within a plan, with fragmentation before and after."""

    class State(models.TextChoices):
        SCHEDULED = "scheduled", _("Scheduled")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")
        SKIPPED = "skipped", _("Skipped")

    plan = models.ForeignKey(DefragPlan, on_delete=models.CASCADE, related_name="reloads")
    deployment = models.ForeignKey(
        "inventory.Deployment", on_delete=models.CASCADE, related_name="+"
    )
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.CASCADE, related_name="+")
    order = models.PositiveSmallIntegerField()
    not_before = models.DateTimeField()
    state = models.CharField(max_length=10, choices=State, default=State.SCHEDULED)
    reason = models.CharField(max_length=32)
    estimated_bytes = models.BigIntegerField()
    action = models.ForeignKey(
        HostAction, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    pid_before = models.IntegerField(null=True, blank=True)
    fragmentation_before = models.FloatField(null=True, blank=True)
    fragmentation_after = models.FloatField(null=True, blank=True)
    reserve_before_bytes = models.BigIntegerField(null=True, blank=True)
    reserve_after_bytes = models.BigIntegerField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["plan", "order"]

    def __str__(self) -> str:
        return f"reload {self.deployment} ({self.plan})"


class HostHistorySummary(models.Model):
    """The 30 days the off-peak planner reads, summed up once a day per host: the mean load
    per hour of the week and each card's daily fragmentation peaks. Reading 1,000 of these
    instead of 30 days of hourly rollups per card is what keeps the hourly planner fast."""

    host = models.OneToOneField(
        "inventory.Host", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    computed_at = models.DateTimeField()
    first_day = models.PositiveIntegerField(help_text="Days since 1970-01-01 of peaks[0].")
    weekly_load = models.JSONField(default=list)  # 168 slots from Monday 00:00 UTC, or null
    fragmentation_peaks = models.JSONField(default=dict)  # card id -> daily peaks, oldest first

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "host history summaries"

    def __str__(self) -> str:
        return f"history of {self.host_id} at {self.computed_at:%Y-%m-%d %H:%M}"
