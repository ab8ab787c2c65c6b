from django.utils.translation import gettext_lazy as _
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from console.core.api_tokens.models import ApiToken, digest_of


class DigestTokenAuthentication(TokenAuthentication):
    """DRF's `Authorization: Token <key>`, the key looked up by its digest."""

    model = ApiToken

    def authenticate_credentials(self, key):
        try:
            token = ApiToken.objects.select_related("user").get(digest=digest_of(key))
        except ApiToken.DoesNotExist:
            raise AuthenticationFailed(_("Invalid token.")) from None
        if not token.user.is_active:
            raise AuthenticationFailed(_("User inactive or deleted."))
        return token.user, token
