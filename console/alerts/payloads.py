"""What each channel is sent about a host's alerts: Alertmanager's API v2 body, the generic
webhook's JSON, an e-mail. Built when the evaluation decides, so every retry sends the same."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.urls import reverse

from console.alerts.models import Alert


def _url(path: str) -> str:
    return settings.CONSOLE_BASE_URL.rstrip("/") + path


def _iso(moment: dt.datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def alert_labels(alert: Alert) -> dict[str, str]:
    """dcgm-exporter's labels where the alert is about a card, and the console's own."""
    labels = {str(key): str(value) for key, value in alert.labels.items()}
    labels.update(alertname=alert.rule.slug, severity=alert.severity, source="gpu-console")
    return labels


def runbook_url(alert: Alert) -> str:
    slug = alert.rule.runbook_slug
    return _url(reverse("runbook-detail", args=[slug])) if slug else ""


def summary(alert: Alert) -> str:
    values = ", ".join(f"{key}={value}" for key, value in sorted(alert.values.items()))
    return f"{alert}: {values}" if values else str(alert)


def alertmanager_alerts(alerts: list[Alert], now: dt.datetime) -> list[dict]:
    resend = settings.ALERT_ALERTMANAGER_RESEND_S
    body = []
    for alert in alerts:
        resolved = alert.state == Alert.State.RESOLVED
        # A firing alert is re-posted every `resend` seconds; should the console stop, the
        # Alertmanager resolves it on its own a few resends later.
        ends = alert.ended_at if resolved else now + dt.timedelta(seconds=4 * resend)
        annotations = {"summary": summary(alert), "console_url": _url(alert.get_absolute_url())}
        if alert.rule.runbook_slug:
            annotations["runbook_url"] = runbook_url(alert)
        body.append(
            {
                "labels": alert_labels(alert),
                "annotations": annotations,
                "startsAt": _iso(alert.firing_at or alert.started_at),
                "endsAt": _iso(ends),
                "generatorURL": _url(alert.get_absolute_url()),
            }
        )
    return body


def webhook_body(group: str, items: list[tuple[Alert, str]]) -> dict:
    return {
        "version": "1",
        "source": "gpu-console",
        "group": group,
        "alerts": [
            {
                "id": alert.pk,
                "status": alert.state,
                "notification": kind,
                "rule": alert.rule.slug,
                "severity": alert.severity,
                "labels": alert_labels(alert),
                "values": alert.values,
                "startsAt": _iso(alert.firing_at or alert.started_at),
                "endsAt": _iso(alert.ended_at),
                "url": _url(alert.get_absolute_url()),
                "runbook_url": runbook_url(alert),
            }
            for alert, kind in items
        ],
    }


def email_message(group: str, items: list[tuple[Alert, str]]) -> dict:
    firing = sum(1 for alert, kind in items if kind != "resolved")
    resolved = len(items) - firing
    parts = [f"{firing} firing"] if firing else []
    parts += [f"{resolved} resolved"] if resolved else []
    subject = f"[gpu-console] {group}: {', '.join(parts)}"
    lines = []
    for alert, kind in items:
        lines.append(f"{kind.upper()} [{alert.severity}] {summary(alert)}")
        lines.append(f"  {_url(alert.get_absolute_url())}")
        if alert.rule.runbook_slug:
            lines.append(f"  runbook: {runbook_url(alert)}")
    return {"subject": subject[:200], "body": "\n".join(lines), "to": settings.ALERT_EMAIL_TO}
