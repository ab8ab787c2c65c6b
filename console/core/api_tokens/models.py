import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

FINGERPRINT_LENGTH = 12


def digest_of(key: str) -> str:
    """SHA-256, unsalted: a key is 160 random bits, not a password one could guess, and a
    request's key must find its row by one indexed lookup."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return secrets.token_hex(20)


class ApiToken(models.Model):
    """A user's API token (`Authorization: Token <key>`). The database, its backups, the admin
    and the audit trail hold its digest only; the admin shows a fingerprint of it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        verbose_name=_("user"),
    )
    digest = models.CharField(_("digest"), max_length=64, unique=True, editable=False)
    created = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        app_label = "console"
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self) -> str:
        return f"{self.user} {self.fingerprint}"

    @property
    def fingerprint(self) -> str:
        """The digest's start: tells tokens apart, and works as no credential."""
        return self.digest[:FINGERPRINT_LENGTH]
