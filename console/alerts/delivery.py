"""Send one notification on its channel; raises on failure so the task retries it."""

from __future__ import annotations

import json
import urllib.request

from django.conf import settings
from django.core.mail import send_mail

from console.alerts.models import Notification


def _post_json(url: str, body) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=settings.ALERT_DELIVERY_TIMEOUT_S) as answer:
        answer.read()


def alertmanager_endpoint(base_url: str) -> str:
    return base_url.rstrip("/") + "/api/v2/alerts"


def deliver(note: Notification) -> None:
    if note.channel == Notification.Channel.ALERTMANAGER:
        _post_json(alertmanager_endpoint(settings.ALERT_ALERTMANAGER_URL), note.payload)
    elif note.channel == Notification.Channel.WEBHOOK:
        _post_json(settings.ALERT_WEBHOOK_URL, note.payload)
    else:
        message = note.payload
        send_mail(
            message["subject"],
            message["body"],
            settings.DEFAULT_FROM_EMAIL,
            message["to"],
            fail_silently=False,
        )
