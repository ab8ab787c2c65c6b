from rest_framework.permissions import BasePermission

from console.access import permission_name


class CanView(BasePermission):
    """Reading needs the role's view permission on the view's model, like the pages do."""

    message = "Your role may not read this."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(
            user and user.is_authenticated and user.has_perm(permission_name(view.model, "view"))
        )
