"""Placement proposals: a change to what runs where, its gate results, decisions and load tests.

A proposal's `revision` goes up with every edit; gate results and decisions carry the revision
they were made for, so an edit leaves earlier checks and approvals on record but no longer
counting.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from console.core.access import VisibleQuerySet
from console.proposals.gates import Gate, GateStatus
from console.proposals.transitions import State
from inventory.models import Deployment, Gpu
from inventory.models.fleet import EngineSettings


class ProposalQuerySet(VisibleQuerySet):
    def awaiting(self, approver) -> "ProposalQuerySet":
        """What an approver may decide: ready for approval and not their own (four eyes)."""
        return self.filter(state=State.READY).exclude(author=approver)

    def failed_checks(self, approver) -> "ProposalQuerySet":
        """Sent back by their own gates (not by an approver) and not their own: the approver
        may reject them or comment, never approve them."""
        failing = GateResult.objects.filter(
            proposal=models.OuterRef("pk"),
            revision=models.OuterRef("revision"),
            status__in=[status.value for status in GateStatus if not status.passed],
        )
        return (
            self.filter(state=State.CHANGES_REQUESTED)
            .exclude(author=approver)
            .filter(models.Exists(failing))
        )


# How pages and e-mails name a state (transitions.State is pure and stays English).
STATE_LABELS = {
    State.DRAFT: _("draft"),
    State.SUBMITTED: _("submitted"),
    State.CHECKING: _("checking"),
    State.READY: _("ready for approval"),
    State.CHANGES_REQUESTED: _("changes requested"),
    State.APPROVED: _("approved"),
    State.REJECTED: _("rejected"),
    State.APPLIED: _("applied"),
    State.VERIFIED: _("verified"),
    State.ROLLED_BACK: _("rolled back"),
}


class Proposal(EngineSettings):
    class Action(models.TextChoices):
        ADD = "add", _("Add a model")
        MOVE = "move", _("Move a deployment")
        RESIZE = "resize", _("Resize a deployment")
        REMOVE = "remove", _("Remove a deployment")

    STATES = [(state.value, capfirst(STATE_LABELS[state])) for state in State]

    action = models.CharField(max_length=8, choices=Action, default=Action.ADD)
    served_model = models.ForeignKey(
        "inventory.ServedModel", on_delete=models.PROTECT, related_name="proposals"
    )
    host = models.ForeignKey(
        "inventory.Host",
        on_delete=models.PROTECT,
        related_name="proposals",
        help_text=_("Where the model runs after the change."),
    )
    deployment = models.ForeignKey(
        "inventory.Deployment",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="proposals",
        help_text=_("The deployment moved, resized or removed; for an addition, the one created."),
    )
    gpus = models.ManyToManyField(
        "inventory.Gpu",
        blank=True,
        related_name="+",
        verbose_name=_("cards"),
        help_text=_("The target cards; leave empty when the solver chooses."),
    )
    replaces = models.ManyToManyField(
        "inventory.Deployment",
        blank=True,
        related_name="replaced_by",
        verbose_name=_("replaces"),
        help_text=_(
            "Deployments on this host the change takes over from: stopped when it is applied, "
            "and no longer counted on their cards by the checks."
        ),
    )
    let_solver_choose = models.BooleanField(
        _("let the solver choose the cards"),
        default=False,
        help_text=_("The checks run the placement solver on the host as it is now."),
    )
    card_count = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(16)],
        help_text=_("Cards the deployment spans (tensor parallelism), when the solver chooses."),
    )
    solver_gpus = models.ManyToManyField(
        "inventory.Gpu",
        blank=True,
        related_name="+",
        help_text=_("The cards the solver chose at the latest check."),
    )
    mig_slice = models.ForeignKey(
        "inventory.MigSlice", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    isolation_mode = models.CharField(max_length=16, choices=Deployment.Isolation)
    mps_active_thread_percentage = models.PositiveSmallIntegerField(
        _("MPS active thread percentage"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text=_(
            "MPS only: the share of the card's SMs its clients may use. Left blank, a "
            "move or resize keeps the deployment's share and an addition takes no limit."
        ),
    )
    kv_reservation_bytes = models.PositiveBigIntegerField(
        _("KV reservation (bytes)"), default=0, help_text=_("All the deployment's cards together.")
    )
    kv_reservation_basis = models.CharField(
        _("KV reservation basis"),
        max_length=8,
        choices=Deployment.KvBasis,
        default=Deployment.KvBasis.P95,
    )
    kv_tokens_per_request = models.PositiveIntegerField(
        _("KV tokens per request"),
        null=True,
        blank=True,
        help_text=_("Context a request holds in the KV cache (prompt and output)."),
    )
    expected_p95_concurrency = models.FloatField(
        _("expected P95 concurrency"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_(
            "Running requests at the busy end of the day, for a model with no history "
            "on this deployment."
        ),
    )
    expected_request_rate = models.FloatField(
        _("expected requests per second"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Its share of the host's traffic, to check the combined load test's ratio."),
    )
    admission_policy = models.CharField(
        _("above the reservation"),
        max_length=24,
        choices=Deployment.Admission,
        default=Deployment.Admission.NONE,
        help_text=_("What happens to demand above the KV reservation: P95 is not a ceiling."),
    )
    canary_share_pct = models.PositiveSmallIntegerField(
        _("canary share (%)"),
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text=_("Traffic the first step sends to the new placement."),
    )
    rollout_steps = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text=_("Steps from the canary share to all traffic."),
    )
    rationale = models.TextField(help_text=_("Why this change, and what it risks."))
    mps_acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    mps_acknowledged_at = models.DateTimeField(null=True, blank=True)

    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="proposals"
    )
    state = models.CharField(max_length=20, choices=STATES, default=State.DRAFT, db_index=True)
    revision = models.PositiveIntegerField(default=1)
    # Drawn at apply time, so the proposal keeps showing what it changed.
    placement_before = models.JSONField(null=True, blank=True)
    placement_after = models.JSONField(null=True, blank=True)
    # The deployment as it was before apply (None for an addition), for a roll-back.
    deployment_before = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProposalQuerySet.as_manager()

    class Meta:
        verbose_name = _("proposal")
        verbose_name_plural = _("proposals")
        ordering = ["-updated_at", "-id"]
        permissions = [
            ("approve_proposal", "Can approve, reject or send back proposals"),
            ("apply_proposal", "Can apply, verify and roll back approved proposals"),
        ]
        indexes = [models.Index(fields=["host", "state"])]

    def __str__(self) -> str:
        # In English whatever the request's language: the audit trail stores it.
        return f"#{self.pk} {self.action} {self.served_model.name} on {self.host.name}"

    def get_absolute_url(self) -> str:
        return reverse("proposal-detail", args=[self.pk])

    @property
    def state_label(self) -> str:
        return str(STATE_LABELS[State(self.state)])

    def clean(self) -> None:
        errors: dict[str, str] = {}
        changes_existing = self.action != self.Action.ADD
        if changes_existing and self.deployment_id is None:
            errors["deployment"] = f"Pick the deployment to {self.action}."
        if changes_existing and self.deployment_id is not None:
            deployment = self.deployment
            if deployment.status == Deployment.Status.STOPPED:
                errors["deployment"] = f"{deployment} is stopped already."
            if self.served_model_id != deployment.served_model_id:
                errors["served_model"] = f"{deployment} serves {deployment.served_model}."
            if self.action != self.Action.MOVE and self.host_id != deployment.host_id:
                errors["host"] = (
                    f"Only a move changes the host; {deployment} runs on {deployment.host}."
                )
        if self.action == self.Action.ADD and self.deployment_id is not None:
            errors["deployment"] = "An addition creates its deployment when applied."
        errors |= Deployment.placement_errors(self)
        if self.isolation_mode == Deployment.Isolation.MIG and self.let_solver_choose:
            # The solver picks cards, and a MIG deployment takes a slice: that is the error.
            errors.pop("mig_slice", None)
            errors["let_solver_choose"] = "Pick the MIG slice; the solver does not create one."
        if errors:
            raise ValidationError(errors)

    def thread_share_for(self, deployment: Deployment | None) -> int | None:
        """The MPS thread share the deployment takes when this proposal is applied."""
        if self.isolation_mode != Deployment.Isolation.MPS:
            return None
        if self.mps_active_thread_percentage is not None or deployment is None:
            return self.mps_active_thread_percentage
        return deployment.mps_active_thread_percentage

    def leaving_ids(self) -> set[int]:
        """The deployments the change takes over from: the one it moves, resizes or removes,
        and those it replaces (stopped when it is applied). They no longer count as co-tenants.
        """
        leaving = {self.deployment_id} if self.action != self.Action.ADD else set()
        # The what-if stores its proposal, and what it replaces, inside a rolled-back savepoint,
        # so a preview reads them here as a filed proposal does.
        leaving |= set(self.replaces.values_list("pk", flat=True))
        return leaving - {None}

    def validate_replaced(self, replaced) -> None:
        """The M2M replaced deployments: running ones of this host, never the one it changes."""
        wrong = [
            str(d)
            for d in replaced
            if d.host_id != self.host_id
            or d.status == Deployment.Status.STOPPED
            or d.pk == self.deployment_id
        ]
        if wrong:
            raise ValidationError(
                {"replaces": _("Only running deployments of %(host)s, other than the one it "
                               "changes, can be replaced: %(wrong)s.")
                 % {"host": self.host, "wrong": ", ".join(wrong)}}
            )  # fmt: skip

    def validate_cards(self, gpus) -> None:
        """The M2M cards, which clean() cannot see before they are saved."""
        if self.action == self.Action.REMOVE or self.let_solver_choose:
            return
        if self.isolation_mode == Deployment.Isolation.MIG:
            if gpus:
                raise ValidationError({"gpus": "A MIG deployment takes its slice, not cards."})
            return
        Deployment.validate_cards(self.host, self.isolation_mode, gpus)
        partitioned = [str(gpu) for gpu in gpus if gpu.mig_mode == Gpu.MigMode.ENABLED]
        if partitioned:
            raise ValidationError(
                {"gpus": f"MIG is enabled on {', '.join(partitioned)}: pick its MIG slice."}
            )

    def target_gpus(self) -> list:
        """The cards the change lands on: as chosen by the author, or by the solver."""
        chosen = self.solver_gpus if self.let_solver_choose else self.gpus
        return list(chosen.select_related("host").order_by("index"))


class GateResult(models.Model):
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="gate_results")
    revision = models.PositiveIntegerField()
    gate = models.CharField(max_length=16, choices=[(g.value, g.title) for g in Gate])
    status = models.CharField(max_length=8, choices=[(s.value, s.value) for s in GateStatus])
    # The summary in English, for the audit trail and approvals' evidence; summary_reason holds
    # it as a code and figures (inventory.analytics.reasons) when the gate gives one, and
    # reasons holds each failed check as such a code or, from a gate not yet moved onto codes,
    # as text.
    summary = models.TextField()
    summary_reason = models.JSONField(default=dict, blank=True)
    reasons = models.JSONField(default=list)
    numbers = models.JSONField(default=dict)
    evidence = models.JSONField(default=dict)
    runbook_slug = models.SlugField(max_length=80)
    checked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["proposal", "-revision", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "revision", "gate"], name="gate_result_once_per_revision"
            )
        ]

    def __str__(self) -> str:
        return f"{self.proposal_id} r{self.revision} {self.gate}: {self.status}"

    @property
    def passed(self) -> bool:
        return GateStatus(self.status).passed

    @property
    def title(self) -> str:
        return Gate(self.gate).title

    def as_evidence(self) -> dict:
        """What an approval keeps of this result."""
        return {
            "gate": self.gate,
            "status": self.status,
            "summary": self.summary,
            "summary_reason": self.summary_reason,
            "reasons": self.reasons,
            "numbers": self.numbers,
            "evidence": self.evidence,
            "runbook_slug": self.runbook_slug,
            "checked_at": self.checked_at.isoformat(),
        }


class Decision(models.Model):
    class Kind(models.TextChoices):
        APPROVE = "approve", _("Approved")
        REJECT = "reject", _("Rejected")
        REQUEST_CHANGES = "request_changes", _("Changes requested")

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="decisions")
    revision = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(auto_now_add=True)
    comment = models.TextField(blank=True)
    # The gate results as the approver saw them.
    evidence = models.JSONField(default=list)
    voided_at = models.DateTimeField(null=True, blank=True)
    voided_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["proposal", "-decided_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} by {self.decided_by} (revision {self.revision})"


class LoadTest(models.Model):
    class Format(models.TextChoices):
        VLLM_JSON = "vllm-json", _("vLLM bench serve --save-result JSON")
        CSV = "csv", _("CSV (model, card, P99 latency, card peak)")
        MEASURED = "measured", _("Run by the console")

    class Status(models.TextChoices):
        QUEUED = "queued", _("Queued")
        RUNNING = "running", _("Running")
        DONE = "done", _("Done")
        FAILED = "failed", _("Failed")
        CANCELLED = "cancelled", _("Cancelled")

    FINISHED = (Status.DONE, Status.FAILED, Status.CANCELLED)

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="load_tests")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    uploaded_at = models.DateTimeField(auto_now_add=True)
    source_format = models.CharField(max_length=10, choices=Format)
    files = models.JSONField(default=list, help_text=_("Names of the imported files."))
    # loadtests.LoadTestRun as JSON: per-model results and per-card peaks (for a test the
    # console ran, the peaks of its own telemetry); empty until a console test finishes.
    run = models.JSONField(default=dict)
    # A test the console runs (source_format "measured"): its plan, progress and result.
    status = models.CharField(max_length=10, choices=Status, default=Status.DONE)
    plan = models.JSONField(null=True, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    # When a worker took it up: a test running for longer than the task's time limit has lost
    # its worker (resume_stalled gives it up).
    started_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    failure_code = models.CharField(max_length=40, blank=True)
    failure_params = models.JSONField(default=dict, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["proposal", "-uploaded_at", "-id"]

    def __str__(self) -> str:
        return f"load test {self.pk} of proposal {self.proposal_id}"

    def get_absolute_url(self) -> str:
        return reverse("proposal-load-test-result", args=[self.proposal_id, self.pk])

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED


class Notification(models.Model):
    class Channel(models.TextChoices):
        EMAIL = "email", _("E-mail")
        WEBHOOK = "webhook", _("Webhook")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        SENT = "sent", _("Sent")
        FAILED = "failed", _("Failed after retries")

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="notifications")
    event = models.CharField(max_length=20, help_text=_("The state the proposal reached."))
    channel = models.CharField(max_length=8, choices=Channel)
    recipients = models.JSONField(default=list)
    subject = models.CharField(max_length=200)
    body = models.TextField()
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=8, choices=Status, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["proposal", "-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.channel} {self.event} for proposal {self.proposal_id}: {self.status}"
