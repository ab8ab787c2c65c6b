"""One way for every API endpoint to decide who reads what, like the pages do.

A view names its `model`; reading needs the role's view permission on it, and lists hold only
what `visible_to` lets the user see.
"""

from rest_framework.generics import ListAPIView
from rest_framework.permissions import BasePermission

from console.core.access import permission_name


class CanView(BasePermission):
    """Reading needs the role's view permission on the view's model, like the pages do."""

    message = "Your role may not read this."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(
            user and user.is_authenticated and user.has_perm(permission_name(view.model, "view"))
        )


class VisibleList(ListAPIView):
    """A paged, filtered list of `model` rows the user may see, in `ordering`."""

    permission_classes = [CanView]
    related: tuple[str, ...] = ()
    ordering: tuple[str, ...] = ()

    def get_queryset(self):
        rows = self.model.objects.visible_to(self.request.user).select_related(*self.related)
        return rows.order_by(*self.ordering) if self.ordering else rows
