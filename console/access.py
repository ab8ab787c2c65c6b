"""One way for every view to fetch what it shows.

A user who may not see an object gets 404 (its existence is not revealed); a user who may see
it but not change it gets 403 when asking to change it.
"""

from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404


class VisibleQuerySet(models.QuerySet):
    def visible_to(self, user) -> "VisibleQuerySet":
        if user.is_authenticated and user.has_perm(permission_name(self.model, "view")):
            return self
        return self.none()


def permission_name(model: type[models.Model], action: str) -> str:
    opts = model._meta
    return f"{opts.app_label}.{action}_{opts.model_name}"


def get_visible_or_404(user, queryset: models.QuerySet, **lookup) -> models.Model:
    try:
        return queryset.visible_to(user).get(**lookup)
    except queryset.model.DoesNotExist:
        raise Http404(f"No {queryset.model._meta.verbose_name} matches the given query.") from None


def get_changeable_or_403(
    user, queryset: models.QuerySet, *, action: str = "change", **lookup
) -> models.Model:
    obj = get_visible_or_404(user, queryset, **lookup)
    require_permission(user, type(obj), action)
    return obj


def require_permission(user, model: type[models.Model], action: str) -> None:
    if not user.has_perm(permission_name(model, action)):
        raise PermissionDenied(f"Your role may not {action} {model._meta.verbose_name_plural}.")
