"""Alert rules, the alerts they raise, silences, and the notifications sent about them."""

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from console.alerts.conditions import CONDITIONS, Scope
from console.core.access import VisibleQuerySet


class Severity(models.TextChoices):
    CRITICAL = "critical", _("Critical")
    WARNING = "warning", _("Warning")
    INFO = "info", _("Info")


class AlertRule(models.Model):
    class Kind(models.TextChoices):
        CARD_MEMORY = "card_memory", _("Card memory used above a share of total")
        HEADROOM_LOW = "headroom_low", _("Headroom below N GiB on the best card")
        FRAGMENTATION_RED = "fragmentation_red", _("Fragmentation red on a card with tenants")
        KV_DEMAND = "kv_demand", _("KV demand above the reservation")
        COPEAK = "copeak", _("Co-peak over capacity")
        P99_OVER_SLO = "p99_over_slo", _("P99 latency over SLO")
        INTERFERENCE = "interference", _("Interference flagged")
        COLLECTOR_STALE = "collector_stale", _("Collector stale")
        COLLECTOR_FAULTS = "collector_faults", _("Collector faults rising")
        INGEST_LAG = "ingest_lag", _("Ingest lag")
        DEAD_LETTERS = "dead_letters", _("Dead letters present")
        EVENT = "event", _("Event")

    class ScopeKind(models.TextChoices):
        FLEET = "fleet", _("Whole fleet")
        HOST_LABEL = "host_label", _("Hosts with a label")
        HOST = "host", _("One host")
        DEPLOYMENT = "deployment", _("One deployment")

    slug = models.SlugField(max_length=80, unique=True)
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind)
    severity = models.CharField(max_length=10, choices=Severity, default=Severity.WARNING)
    enabled = models.BooleanField(default=True)
    scope = models.CharField(max_length=12, choices=ScopeKind, default=ScopeKind.FLEET)
    scope_label = models.CharField(max_length=100, blank=True, help_text='"key=value"')
    host = models.ForeignKey(
        "inventory.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    deployment = models.ForeignKey(
        "inventory.Deployment", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    for_s = models.FloatField(
        default=0, help_text=_("Seconds the condition must hold before the alert fires.")
    )
    resolve_after_s = models.FloatField(
        default=60, help_text=_("Seconds the condition must stay clear before it resolves.")
    )
    repeat_interval_s = models.FloatField(
        default=4 * 3600, help_text=_("Tell again while firing and unacknowledged (0: never).")
    )
    params = models.JSONField(default=dict, blank=True)
    runbook_slug = models.SlugField(max_length=80, blank=True)
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(scope="fleet")
                    | models.Q(scope="host", host__isnull=False)
                    | models.Q(scope="deployment", deployment__isnull=False)
                    | (models.Q(scope="host_label") & ~models.Q(scope_label=""))
                ),
                name="alertrule_scope_has_target",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("alert-rule-edit", args=[self.slug])

    def scope_spec(self) -> Scope:
        return Scope(self.scope, self.host_id, self.deployment_id, self.scope_label)

    def condition(self):
        return CONDITIONS[self.kind]


class AlertQuerySet(VisibleQuerySet):
    def open(self):
        return self.filter(state__in=[Alert.State.PENDING, Alert.State.FIRING])

    def firing(self):
        return self.filter(state=Alert.State.FIRING)


class Alert(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", _("Pending")
        FIRING = "firing", _("Firing")
        RESOLVED = "resolved", _("Resolved")

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    fingerprint = models.CharField(max_length=200)
    state = models.CharField(max_length=10, choices=State, db_index=True)
    severity = models.CharField(max_length=10, choices=Severity)
    labels = models.JSONField(default=dict)
    values = models.JSONField(default=dict, help_text="What crossed, at the last crossing.")
    host = models.ForeignKey(
        "inventory.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    gpu = models.ForeignKey(
        "inventory.Gpu", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    deployment = models.ForeignKey(
        "inventory.Deployment", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    started_at = models.DateTimeField()
    firing_at = models.DateTimeField(null=True, blank=True)
    last_crossed_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    last_notified_at = models.DateTimeField(null=True, blank=True)
    notifications_sent = models.PositiveIntegerField(default=0)
    resolved_notified = models.BooleanField(default=False)
    alertmanager_posted_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledge_comment = models.TextField(blank=True)

    objects = AlertQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at", "-id"]
        permissions = [
            ("acknowledge_alert", "Can acknowledge alerts"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "fingerprint"],
                condition=models.Q(state__in=["pending", "firing"]),
                name="alert_one_open_per_fingerprint",
            )
        ]
        indexes = [models.Index(fields=["host", "state"])]

    def __str__(self) -> str:
        where = self.labels.get("Hostname", "fleet")
        card = self.labels.get("gpu")
        return f"{self.rule.name} on {where}" + (f" card {card}" if card is not None else "")

    def get_absolute_url(self) -> str:
        return reverse("alert-detail", args=[self.pk])

    @property
    def alertname(self) -> str:
        return self.rule.slug


class SilenceQuerySet(VisibleQuerySet):
    def active(self, now):
        return self.filter(starts_at__lte=now, ends_at__gt=now)


class Silence(models.Model):
    """Mutes the alerts whose labels match all its matchers, for a time (maintenance)."""

    matchers = models.JSONField(help_text='Labels to match, e.g. {"Hostname": "infer-01"}.')
    comment = models.TextField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(db_index=True)
    ended_early_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = SilenceQuerySet.as_manager()

    class Meta:
        ordering = ["-ends_at", "-id"]

    def __str__(self) -> str:
        matched = ", ".join(f"{key}={value}" for key, value in sorted(self.matchers.items()))
        return f"silence {matched}"


class Notification(models.Model):
    """One message about one host's alerts (a card storm is one message), on one channel.

    Written by the evaluation that decided it and sent by a Celery task after the commit, with
    retries; `key` makes a decision written twice one row."""

    class Channel(models.TextChoices):
        EMAIL = "email", _("E-mail")
        WEBHOOK = "webhook", _("Webhook")
        ALERTMANAGER = "alertmanager", _("Alertmanager")

    class Status(models.TextChoices):
        PENDING = "pending", _("Waiting")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed")

    key = models.CharField(max_length=200, unique=True)
    channel = models.CharField(max_length=12, choices=Channel)
    group = models.CharField(max_length=100, help_text="The host, or the fleet.")
    alerts = models.ManyToManyField(Alert, related_name="notifications")
    payload = models.JSONField()
    status = models.CharField(max_length=8, choices=Status, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "alert notification"

    def __str__(self) -> str:
        return f"{self.channel} to {self.group} ({self.status})"
