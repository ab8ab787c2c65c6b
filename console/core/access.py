"""One way for every view to fetch what it shows.

A user who may not see an object gets 404 (its existence is not revealed); a user who may see
it but not change it gets 403 when asking to change it.
"""

from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy


class VisibleQuerySet(models.QuerySet):
    def visible_to(self, user) -> "VisibleQuerySet":
        if user.is_authenticated and user.has_perm(permission_name(self.model, "view")):
            return self
        return self.none()


def permission_name(model: type[models.Model], action: str) -> str:
    opts = model._meta
    return f"{opts.app_label}.{action}_{opts.model_name}"


# The verbs a refusal names, translated (the permission codenames stay as they are).
ACTION_WORDS = {
    "view": gettext_lazy("view"),
    "add": gettext_lazy("add"),
    "change": gettext_lazy("change"),
    "delete": gettext_lazy("delete"),
    "apply": gettext_lazy("apply"),
    "approve": gettext_lazy("approve"),
    "acknowledge": gettext_lazy("acknowledge"),
    "replay": gettext_lazy("replay"),
}


def get_visible_or_404(user, queryset: models.QuerySet, **lookup) -> models.Model:
    try:
        return queryset.visible_to(user).get(**lookup)
    except queryset.model.DoesNotExist:
        raise Http404(
            _("No %(thing)s matches the given query.")
            % {"thing": queryset.model._meta.verbose_name}
        ) from None


def get_changeable_or_403(
    user, queryset: models.QuerySet, *, action: str = "change", **lookup
) -> models.Model:
    obj = get_visible_or_404(user, queryset, **lookup)
    require_permission(user, type(obj), action)
    return obj


def require_permission(user, model: type[models.Model], action: str) -> None:
    if not user.has_perm(permission_name(model, action)):
        raise PermissionDenied(
            _("Your role may not %(action)s %(things)s.")
            % {
                "action": ACTION_WORDS.get(action, action),
                "things": model._meta.verbose_name_plural,
            }
        )
