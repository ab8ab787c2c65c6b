"""What exists in the fleet and what runs where: hosts, cards, MIG slices, models, deployments.

Memory is stored in bytes and accounted per card; nothing here sums capacity across cards.
"""

import math
import re
import secrets

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from console.core.access import VisibleQuerySet
from inventory.analytics.kv import CardKv, KvShape, kv_bytes_per_token, kv_reservation_per_card
from inventory.telemetry.pod_attribution import selector_problem

HOST_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
host_name_validator = RegexValidator(
    rf"^{HOST_NAME_PATTERN.pattern}$",
    "Use letters, digits, dots, dashes and underscores (at most 63), starting with a letter "
    "or digit.",
)


def new_agent_secret() -> str:
    return secrets.token_urlsafe(32)


def validate_pod_selector(value) -> None:
    if problem := selector_problem(value):
        raise ValidationError(
            "Not a Kubernetes label selector (%(problem)s): give matchLabels as an object of "
            "strings, or matchExpressions with key, operator (In, NotIn, Exists, DoesNotExist) "
            "and values.",
            code=problem,
            params={"problem": problem},
        )


class Host(models.Model):
    # Never in the audit trail as they are: snapshots hold a fingerprint instead.
    SECRET_FIELDS = ("agent_secret",)

    class Status(models.TextChoices):
        ACTIVE = "active", _("Active")
        MAINTENANCE = "maintenance", _("Maintenance")
        DRAINING = "draining", _("Draining")
        OFFLINE = "offline", _("Offline")
        RETIRED = "retired", _("Retired")

    class Collector(models.TextChoices):
        NVML = "nvml", _("NVML (host agent)")
        SIMULATED = "simulated", _("Simulated (demo fleet)")
        NONE = "none", _("Not collected")

    name = models.CharField(max_length=63, unique=True, validators=[host_name_validator])
    address = models.CharField(max_length=255, blank=True, help_text=_("Hostname or IP address."))
    labels = models.JSONField(
        default=dict, blank=True, help_text='Key/value labels, e.g. {"rack": "r12", "team": "llm"}.'
    )
    status = models.CharField(max_length=16, choices=Status, default=Status.ACTIVE)
    collector = models.CharField(max_length=16, choices=Collector, default=Collector.NVML)
    description = models.TextField(blank=True)
    agent_secret = models.CharField(
        max_length=64,
        default=new_agent_secret,
        editable=False,
        help_text=_(
            "Signs this host's telemetry batches (HMAC-SHA256); its agent reads it from "
            "AGENT_SECRET_FILE. Issued at registration; manage.py host_secret shows or rotates it."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name = _("host")
        verbose_name_plural = _("hosts")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("host-detail", args=[self.name])

    def clean(self) -> None:
        if not isinstance(self.labels, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in self.labels.items()
        ):
            raise ValidationError({"labels": "Labels must be an object of text keys and values."})

    @property
    def holds_secret(self) -> bool:
        """Whether its batches and action outcomes can be checked against a secret: nothing
        acts on the word of a host without one (inventory.ingest.signatures)."""
        return bool(self.agent_secret)

    def isolation_modes(self) -> set[str]:
        return set(
            self.deployments.exclude(status=Deployment.Status.STOPPED).values_list(
                "isolation_mode", flat=True
            )
        )


class Gpu(models.Model):
    class MigMode(models.TextChoices):
        DISABLED = "disabled", _("Disabled")
        ENABLED = "enabled", _("Enabled")
        UNSUPPORTED = "unsupported", _("Not supported")

    class ComputeMode(models.TextChoices):
        DEFAULT = "default", _("Default")
        EXCLUSIVE_PROCESS = "exclusive_process", _("Exclusive process")
        PROHIBITED = "prohibited", _("Prohibited")

    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    product_name = models.CharField(max_length=100)
    memory_total_bytes = models.PositiveBigIntegerField()
    mig_mode = models.CharField(max_length=16, choices=MigMode, default=MigMode.DISABLED)
    # The MIG mode NVML says the card takes at its next reset, where it differs from the
    # current one ("" when none is pending).
    mig_mode_pending = models.CharField(max_length=16, choices=MigMode, blank=True)
    # The end of the interval of the batch that last told the card's MIG layout: an older
    # batch, delivered late, never puts an earlier layout back.
    mig_layout_at = models.DateTimeField(null=True, blank=True)
    compute_mode = models.CharField(max_length=20, choices=ComputeMode, default=ComputeMode.DEFAULT)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["host__name", "index"]
        verbose_name = _("GPU")
        constraints = [
            models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_index_per_host")
        ]

    def __str__(self) -> str:
        return f"{self.host.name}:{self.index}"


class OpenSliceManager(models.Manager.from_queryset(VisibleQuerySet)):
    """The card's MIG devices now: a slice closed by a repartition is history, kept for the
    deployments and samples that named it (`MigSlice.history` reads those too)."""

    def get_queryset(self):
        return super().get_queryset().filter(closed_at__isnull=True)


class MigSlice(models.Model):
    """A MIG device: a compute instance inside a GPU instance placed on the card's slots.

    Compute instances of one GPU instance (1c.3g.71gb and 2c.3g.71gb, say) share its slots and
    its memory; different GPU instances never overlap.
    """

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="mig_slices")
    profile_name = models.CharField(
        max_length=32, help_text=_("As NVML names the device, e.g. 3g.71gb or 1c.3g.71gb.")
    )
    start_slot = models.PositiveSmallIntegerField()
    size_slots = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(8)],
        help_text=_("Memory slots the GPU instance occupies from its start slot."),
    )
    memory_bytes = models.PositiveBigIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    gpu_instance_id = models.PositiveSmallIntegerField(null=True, blank=True)
    compute_instance_id = models.PositiveSmallIntegerField(null=True, blank=True)
    # NVML told the agent the profile but not the start (an unprivileged caller): the start is
    # a valid placement the console chose, not necessarily the card's.
    start_inferred = models.BooleanField(default=False)
    closed_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When a repartition of the card removed the device.")
    )

    objects = OpenSliceManager()
    history = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["gpu__host__name", "gpu__index", "start_slot", "compute_instance_id"]
        verbose_name = _("MIG slice")
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "start_slot", "compute_instance_id"],
                condition=models.Q(closed_at__isnull=True),
                name="mig_unique_device_per_slot",
            )
        ]

    def __str__(self) -> str:
        return f"{self.gpu} {self.profile_name}@{self.start_slot}"

    @property
    def end_slot(self) -> int:
        return self.start_slot + self.size_slots

    def gpu_instance_devices(self):
        """Every MIG device (compute instance) of this one's GPU instance, itself included:
        they share its memory."""
        return MigSlice.objects.filter(
            gpu_id=self.gpu_id, start_slot=self.start_slot, size_slots=self.size_slots
        )

    def same_gpu_instance(self, other: "MigSlice") -> bool:
        return (
            self.gpu_instance_id is not None
            and self.gpu_instance_id == other.gpu_instance_id
            and (self.start_slot, self.size_slots) == (other.start_slot, other.size_slots)
        )

    def clean(self) -> None:
        if self.gpu_id is None:
            return
        if self.gpu.mig_mode != Gpu.MigMode.ENABLED:
            raise ValidationError({"gpu": f"MIG is not enabled on {self.gpu}."})
        siblings = MigSlice.objects.filter(gpu=self.gpu).exclude(pk=self.pk)
        for other in siblings:
            overlaps = self.start_slot < other.end_slot and other.start_slot < self.end_slot
            if overlaps and not self.same_gpu_instance(other):
                raise ValidationError(
                    {
                        "start_slot": f"Slots {self.start_slot}-{self.end_slot - 1} overlap "
                        f"{other.profile_name} on slots {other.start_slot}-{other.end_slot - 1}."
                    }
                )


KV_DTYPES = [
    ("fp32", "fp32"),
    ("bf16", "bf16"),
    ("fp16", "fp16"),
    ("fp8_e4m3", "fp8 (e4m3)"),
    ("fp8_e5m2", "fp8 (e5m2)"),
    ("int8", "int8"),
]


class ServedModel(models.Model):
    class Engine(models.TextChoices):
        VLLM = "vllm", _("vLLM")
        SGLANG = "sglang", _("SGLang")
        TGI = "tgi", _("TGI")
        OLLAMA = "ollama", _("Ollama")
        OTHER = "other", _("Other")

    name = models.CharField(max_length=100, unique=True)
    engine = models.CharField(max_length=16, choices=Engine, default=Engine.VLLM)
    weights_bytes = models.PositiveBigIntegerField()
    kv_bytes_per_token = models.PositiveBigIntegerField(
        null=True, blank=True, help_text=_("Leave empty to derive it from the model's shape.")
    )
    num_layers = models.PositiveSmallIntegerField(null=True, blank=True)
    num_kv_heads = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text=_(
            "The model's KV heads (all of them: a tensor-parallel deployment splits them "
            "across its cards, one at least on each; an MLA latent is whole on every card)."
        ),
    )
    head_dim = models.PositiveSmallIntegerField(null=True, blank=True)
    kv_dtype = models.CharField(max_length=10, blank=True, choices=KV_DTYPES)
    uses_mla = models.BooleanField(
        _("uses MLA"),
        default=False,
        help_text=_("Multi-head latent attention caches one compressed latent per layer."),
    )
    kv_lora_rank = models.PositiveSmallIntegerField(_("KV LoRA rank"), null=True, blank=True)
    qk_rope_head_dim = models.PositiveSmallIntegerField(
        _("QK RoPE head dim"), null=True, blank=True
    )
    max_context_tokens = models.PositiveIntegerField(null=True, blank=True)
    priority = models.PositiveSmallIntegerField(
        default=2, help_text=_("Lower is more important; placed first when not all fit.")
    )
    p99_latency_slo_ms = models.PositiveIntegerField(null=True, blank=True)
    metrics_url = models.URLField(blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["priority", "name"]
        verbose_name = _("served model")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("model-detail", args=[self.pk])

    def _shape(self) -> tuple:
        if self.uses_mla:
            return (
                self.num_layers,
                self.kv_lora_rank,
                self.qk_rope_head_dim,
                self.kv_dtype or None,
            )
        return (self.num_layers, self.num_kv_heads, self.head_dim, self.kv_dtype or None)

    def shape_given(self) -> bool:
        return None not in self._shape()

    def kv_shape(self) -> KvShape | None:
        """The architecture the per-card KV figures come from; None when it is not given."""
        if not self.shape_given():
            return None
        return KvShape(
            self.num_layers,
            self.num_kv_heads or 0,
            self.head_dim or 0,
            self.kv_dtype,
            mla=self.uses_mla,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
        )

    @property
    def effective_kv_bytes_per_token(self) -> int | None:
        if self.kv_bytes_per_token:
            return self.kv_bytes_per_token
        if not self.shape_given():
            return None
        return math.ceil(
            kv_bytes_per_token(
                self.num_layers,
                self.num_kv_heads or 0,
                self.head_dim or 0,
                self.kv_dtype,
                mla=self.uses_mla,
                kv_lora_rank=self.kv_lora_rank,
                qk_rope_head_dim=self.qk_rope_head_dim,
            )
        )

    def clean(self) -> None:
        if any(part is not None for part in self._shape()) and not self.shape_given():
            needed = (
                "layers, KV LoRA rank, QK RoPE head dim and KV dtype"
                if self.uses_mla
                else "layers, KV heads, head dim and KV dtype"
            )
            raise ValidationError(f"Give all of {needed}, or none of them.")
        if not self.kv_bytes_per_token and not self.shape_given():
            raise ValidationError(
                {"kv_bytes_per_token": "Give KV bytes per token, or the model's shape."}
            )


class EngineSettings(models.Model):
    """How the engine is told to size its memory: what it takes of each card whatever the
    console reserves (read by the engine-settings gate)."""

    engine_memory_fraction = models.FloatField(
        "engine memory fraction",
        null=True,
        blank=True,
        validators=[MinValueValidator(0.01), MaxValueValidator(1.0)],
        help_text="vLLM --gpu-memory-utilization (default 0.9), SGLang --mem-fraction-static, "
        "TGI --cuda-memory-fraction (default 1.0): the share of each card the engine takes.",
    )
    engine_kv_cache_bytes = models.PositiveBigIntegerField(
        "engine KV cache bytes",
        null=True,
        blank=True,
        help_text="vLLM --kv-cache-memory-bytes: the KV pool per card, in place of the fraction.",
    )
    engine_overhead_bytes = models.PositiveBigIntegerField(
        "engine GPU overhead bytes",
        null=True,
        blank=True,
        help_text="Ollama OLLAMA_GPU_OVERHEAD: memory it keeps free beside the model.",
    )
    engine_context_tokens = models.PositiveIntegerField(
        "engine context tokens",
        null=True,
        blank=True,
        help_text="Ollama context size (num_ctx / OLLAMA_CONTEXT_LENGTH), for its KV.",
    )
    engine_version = models.CharField(max_length=32, blank=True, help_text="e.g. 0.28.0")
    staggered_start = models.BooleanField(
        "starts after its card's other engines",
        default=False,
        help_text="The serving stack starts this engine only once the other engines on its "
        "cards have loaded (they size their memory from what is free at start).",
    )

    class Meta:
        abstract = True


class Deployment(EngineSettings):
    class Isolation(models.TextChoices):
        GPU_GROUP = "gpu_group", _("GPU group")
        MPS = "mps", _("MPS")
        MIG = "mig", _("MIG")
        TIME_SLICING = "time_slicing", _("Time-slicing")

    class KvBasis(models.TextChoices):
        P95 = "p95", _("P95 concurrency + buffer")
        PEAK = "peak", _("Historical peak + buffer")
        MEAN = "mean", _("Mean concurrency")
        MANUAL = "manual", _("Set by hand")
        NONE = "none", _("No reservation")

    class Admission(models.TextChoices):
        QUEUE = "queue", _("Queue the excess")
        SHED_LOW_PRIORITY = "shed_low_priority", _("Shed low-priority load")
        SHRINK_LOW_PRIORITY_KV = "shrink_low_priority_kv", _("Shrink a low-priority model's KV")
        EVICT_LOW_PRIORITY = "evict_low_priority", _("Evict a low-priority model")
        REFUSE = "refuse", _("Refuse new requests")
        NONE = "none", _("None")

    class EndpointApi(models.TextChoices):
        COMPLETIONS = "openai-completions", "OpenAI /v1/completions"
        CHAT = "openai-chat", "OpenAI /v1/chat/completions"
        OLLAMA = "ollama", "Ollama /api/generate"

    class Status(models.TextChoices):
        PLANNED = "planned", _("Planned")
        ACTIVE = "active", _("Active")
        DRAINING = "draining", _("Draining")
        STOPPED = "stopped", _("Stopped")

    served_model = models.ForeignKey(
        ServedModel, on_delete=models.PROTECT, related_name="deployments"
    )
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="deployments")
    gpus = models.ManyToManyField(Gpu, blank=True, related_name="deployments")
    mig_slice = models.ForeignKey(
        MigSlice, null=True, blank=True, on_delete=models.PROTECT, related_name="deployments"
    )
    runtime_name = models.CharField(
        max_length=100,
        blank=True,
        help_text=_("What the serving stack calls it (Kubernetes deployment, systemd unit, ...)."),
    )
    process_name_pattern = models.CharField(
        max_length=200,
        blank=True,
        help_text=_(
            "Regular expression matched against NVML process names, to tell this "
            "deployment's processes from its neighbours' on shared cards."
        ),
    )
    pod_namespace = models.CharField(
        max_length=63, blank=True, help_text="Kubernetes: the namespace of its pods."
    )
    pod_selector = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_pod_selector],
        help_text='Kubernetes: the label selector of its pods, e.g. {"app": "vllm-llama"} or '
        '{"matchExpressions": [...]}; their GPU processes are this deployment\'s.',
    )
    log_path = models.CharField(
        max_length=500,
        blank=True,
        help_text="The engine's log file on its host (a --log-file, a docker json-file log, a "
        "systemd append: file), tailed by the host agent for OOMs and faults.",
    )
    allocator_url = models.URLField(
        blank=True,
        help_text="The allocator exporter the engine loads (inventory.agent.allocator_exporter)"
        ", e.g. http://127.0.0.1:9464/memory_stats.",
    )
    isolation_mode = models.CharField(max_length=16, choices=Isolation)
    pipeline_parallel = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="Pipeline stages; the deployment's cards divided by this is its tensor "
        "parallelism. Each stage caches only its own layers' KV.",
    )
    mps_active_thread_percentage = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    kv_reservation_bytes = models.PositiveBigIntegerField(default=0)
    kv_tokens_per_request = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=_("Context a request holds in the KV cache (prompt and output), for sizing."),
    )
    kv_reservation_basis = models.CharField(max_length=8, choices=KvBasis, default=KvBasis.NONE)
    admission_policy = models.CharField(max_length=24, choices=Admission, default=Admission.NONE)
    status = models.CharField(max_length=10, choices=Status, default=Status.ACTIVE)
    endpoint_url = models.URLField(
        max_length=300,
        blank=True,
        help_text="Where its inference API answers, without the API path "
        "(http://10.0.0.7:8000), for the combined load test.",
    )
    endpoint_api = models.CharField(
        max_length=20, choices=EndpointApi, default=EndpointApi.COMPLETIONS
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        verbose_name = _("deployment")
        verbose_name_plural = _("deployments")
        ordering = ["host__name", "served_model__priority", "served_model__name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(mps_active_thread_percentage__isnull=True)
                | models.Q(isolation_mode="mps"),
                name="deployment_thread_percentage_only_for_mps",
            ),
            models.CheckConstraint(
                condition=models.Q(mig_slice__isnull=True) | models.Q(isolation_mode="mig"),
                name="deployment_mig_slice_only_for_mig",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.served_model.name} on {self.host.name}"

    @classmethod
    def placement_errors(cls, record) -> dict[str, str]:
        """Field errors of a deployment, or of a proposal that would make one: a MIG slice for
        MIG alone and on the host, a thread share for MPS alone, a KV reservation's basis."""
        errors = {}
        if record.isolation_mode == cls.Isolation.MIG:
            if record.mig_slice_id is None:
                errors["mig_slice"] = "A MIG deployment needs its MIG slice."
            elif record.host_id is not None and record.mig_slice.gpu.host_id != record.host_id:
                errors["mig_slice"] = f"{record.mig_slice} is not on {record.host}."
        elif record.mig_slice_id is not None:
            errors["mig_slice"] = "Only MIG deployments sit on a MIG slice."
        if (
            record.mps_active_thread_percentage is not None
            and record.isolation_mode != cls.Isolation.MPS
        ):
            errors["mps_active_thread_percentage"] = "Only MPS deployments take a thread share."
        if record.kv_reservation_basis == cls.KvBasis.NONE and record.kv_reservation_bytes:
            errors["kv_reservation_basis"] = "Say how the KV reservation was sized."
        return errors

    def clean(self) -> None:
        errors = self.placement_errors(self)
        if self.process_name_pattern:
            try:
                re.compile(self.process_name_pattern)
            except re.error as error:
                errors["process_name_pattern"] = f"Not a regular expression: {error}."
        if errors:
            raise ValidationError(errors)

    @classmethod
    def validate_cards(cls, host: Host, isolation_mode: str, gpus) -> None:
        """Cards must belong to the deployment's host; forms call this, as they see the M2M."""
        foreign = [str(gpu) for gpu in gpus if gpu.host_id != host.pk]
        if foreign:
            raise ValidationError({"gpus": f"Not on {host}: {', '.join(foreign)}."})
        if isolation_mode != cls.Isolation.MIG and not gpus:
            raise ValidationError({"gpus": "Pick the cards this deployment runs on."})

    @property
    def tensor_parallel(self) -> int:
        cards = 1 if self.mig_slice_id else len(self.gpus.all())
        return max(1, cards // max(1, self.pipeline_parallel))

    def kv_per_card(self) -> CardKv:
        """This deployment's KV reservation as each of its cards holds it."""
        return kv_reservation_per_card(
            self.kv_reservation_bytes,
            self.served_model.kv_shape(),
            self.tensor_parallel,
            max(1, self.pipeline_parallel),
        )

    def card_labels(self) -> list[str]:
        if self.mig_slice_id:
            return [str(self.mig_slice)]
        return [str(gpu) for gpu in self.gpus.all()]
