"""On-call knowledge: Markdown notes per host, model or topic, with their full edit history."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from console.core.access import VisibleQuerySet

# Isolation modes as deployments name them, and the tag a global note carries for each.
ISOLATION_TAGS = {
    "gpu_group": "gpu-group",
    "mps": "mps",
    "mig": "mig",
    "time_slicing": "time-slicing",
}
# The note the isolation gate asks MPS placements to acknowledge; every MPS host shows it.
MPS_NOTE_SLUG = "mps-not-hard-isolation"


class NoteQuerySet(VisibleQuerySet):
    def for_host(self, host, isolation_modes: set[str]) -> "NoteQuerySet":
        tags = sorted(ISOLATION_TAGS[mode] for mode in isolation_modes if mode in ISOLATION_TAGS)
        wanted = models.Q(scope=RunbookNote.Scope.HOST, host=host)
        if tags:
            wanted |= models.Q(scope=RunbookNote.Scope.GLOBAL, tags__overlap=tags)
        if "mps" in isolation_modes:
            wanted |= models.Q(slug=MPS_NOTE_SLUG)
        pinned_first = models.Case(models.When(scope=RunbookNote.Scope.HOST, then=0), default=1)
        return self.filter(wanted).order_by(pinned_first, "title")


class RunbookNote(models.Model):
    class Scope(models.TextChoices):
        GLOBAL = "global", _("Global")
        HOST = "host", _("Host")
        MODEL = "model", _("Model")
        TOPIC = "topic", _("Topic")

    slug = models.SlugField(max_length=80, unique=True)
    title = models.CharField(max_length=200)
    body = models.TextField(help_text=_("Markdown. Link another note by its slug: [text](slug)."))
    scope = models.CharField(max_length=8, choices=Scope, default=Scope.GLOBAL)
    host = models.ForeignKey(
        "inventory.Host",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="runbook_notes",
    )
    served_model = models.ForeignKey(
        "inventory.ServedModel",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="runbook_notes",
    )
    tags = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    from_library = models.BooleanField(
        default=False, help_text=_("Installed from the default library.")
    )
    version = models.PositiveIntegerField(default=1)
    library_text = models.TextField(
        blank=True, help_text="The default library's text this note was last synced with."
    )
    library_update = models.TextField(
        blank=True,
        help_text="A newer default version of this note shipped with the console, not applied "
        "because the note was edited here: review it and merge what applies.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = NoteQuerySet.as_manager()

    class Meta:
        verbose_name = _("runbook note")
        verbose_name_plural = _("runbook notes")
        ordering = ["title"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(scope="host", host__isnull=False, served_model__isnull=True)
                    | models.Q(scope="model", served_model__isnull=False, host__isnull=True)
                    | models.Q(
                        scope__in=["global", "topic"], host__isnull=True, served_model__isnull=True
                    )
                ),
                name="runbooknote_scope_matches_target",
            )
        ]
        indexes = [models.Index(fields=["scope"])]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("runbook-detail", args=[self.slug])

    @property
    def author_name(self) -> str:
        first = self.revisions.order_by("version").first()
        return first.edited_by_name if first else ""


class RunbookRevision(models.Model):
    note = models.ForeignKey(RunbookNote, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    title = models.CharField(max_length=200)
    body = models.TextField()
    tags = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    edited_by_name = models.CharField(max_length=150)
    edited_at = models.DateTimeField(auto_now_add=True)
    summary = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["note", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["note", "version"], name="revision_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.note.slug} v{self.version}"

    def get_absolute_url(self) -> str:
        return reverse("runbook-revision", args=[self.note.slug, self.version])
