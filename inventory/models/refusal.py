"""A card that takes no new load: set when it ran out of memory, until a person clears it.

The placement gates and the solver's candidate cards leave a refused card out
(console.proposals.gate_checks); degradation sets it when shrinking and evicting were not
enough (console.operations).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from console.core.access import VisibleQuerySet


class CardRefusal(models.Model):
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.CASCADE, related_name="refusals")
    reason_code = models.CharField(max_length=32)
    params = models.JSONField(default=dict, blank=True)
    set_at = models.DateTimeField(auto_now_add=True)
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    objects = VisibleQuerySet.as_manager()

    class Meta:
        ordering = ["-set_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"], condition=Q(cleared_at__isnull=True), name="one_open_refusal"
            )
        ]

    def __str__(self) -> str:
        return f"{self.gpu} refuses new loads ({self.reason_code})"


def refused_gpu_ids(gpu_ids, at=None) -> set[int]:
    """Which of these cards refuse new loads now, or at the moment `at` (a check run as of
    then: a refusal set since did not hold, one cleared since still did)."""
    refusals = CardRefusal.objects.filter(gpu_id__in=list(gpu_ids))
    if at is None:
        refusals = refusals.filter(cleared_at__isnull=True)
    else:
        refusals = refusals.filter(set_at__lte=at).filter(
            Q(cleared_at__isnull=True) | Q(cleared_at__gt=at)
        )
    return set(refusals.values_list("gpu_id", flat=True))
