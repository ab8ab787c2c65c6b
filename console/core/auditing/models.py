"""The audit trail's rows: who did what to which object, before and after, in which change."""

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from console.core.access import VisibleQuerySet
from console.core.auditing.actions import Action
from console.core.auditing.diff import changed_fields


class AuditEntry(models.Model):
    # Not auto_now_add: the demo's history replays changes at the moments they happened.
    at = models.DateTimeField(default=timezone.now, db_index=True)
    # One id per user action: every row that action wrote carries it
    # (console.core.auditing.changes).
    change_id = models.UUIDField(db_index=True, editable=False)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Kept as text too, so the trail still says who after a user is deleted.
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=64, choices=Action.choices, db_index=True)
    content_type = models.ForeignKey(ContentType, on_delete=models.PROTECT)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200)
    host = models.ForeignKey(
        "inventory.Host",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_entries",
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True)

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = _("audit entries")
        indexes = [models.Index(fields=["content_type", "object_id", "-at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_repr}"

    @property
    def changed_fields(self) -> list[str]:
        return changed_fields(self.before, self.after)

    @property
    def short_change_id(self) -> str:
        return self.change_id.hex[:8]
