"""What each user chooses for themselves: for now the time zone every time is shown in."""

from zoneinfo import available_timezones

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


def validate_time_zone(name: str) -> None:
    if name not in available_timezones():
        raise ValidationError(f"Not an IANA time zone: {name[:60]}.", code="unknown_time_zone")


class Preference(models.Model):
    class Source(models.TextChoices):
        BROWSER = "browser", "taken from the browser at first login"
        CHOSEN = "chosen", "chosen on the profile page"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference"
    )
    time_zone = models.CharField(max_length=64, validators=[validate_time_zone])
    time_zone_source = models.CharField(max_length=8, choices=Source)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "console"

    def __str__(self) -> str:
        return f"{self.user}: {self.time_zone}"
