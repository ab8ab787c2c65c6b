"""Tell approvers a proposal is ready, and its author what was decided: e-mail and webhook.

Each message is a Notification row written in the deciding transaction and delivered by a
Celery task after the commit, with retries; a mail server or webhook that is down never blocks
or undoes the decision, and the row says what happened.
"""

from __future__ import annotations

import json
import logging
import urllib.request

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone, translation
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from console.proposals import queue
from console.proposals.models import STATE_LABELS, Notification, Proposal
from console.proposals.transitions import State

log = logging.getLogger(__name__)


def proposal_url(proposal: Proposal) -> str:
    return settings.CONSOLE_BASE_URL.rstrip("/") + proposal.get_absolute_url()


def _payload(proposal: Proposal, message: str, decided_by) -> dict:
    return {
        "event": proposal.state,
        "proposal": {
            "id": proposal.pk,
            "url": proposal_url(proposal),
            "summary": str(proposal),
            "action": proposal.action,
            "model": proposal.served_model.name,
            "host": proposal.host.name,
            "state": proposal.state,
            "revision": proposal.revision,
            "author": proposal.author.get_username(),
        },
        "decided_by": decided_by.get_username() if decided_by else None,
        "message": message,
    }


def _queue(proposal: Proposal, *, recipients: list[str], subject: str, body: str, payload) -> None:
    rows = []
    if recipients:
        rows.append(
            Notification(
                proposal=proposal,
                event=proposal.state,
                channel=Notification.Channel.EMAIL,
                recipients=recipients,
                subject=subject[:200],
                body=body,
            )
        )
    if settings.PROPOSAL_WEBHOOK_URL:
        rows.append(
            Notification(
                proposal=proposal,
                event=proposal.state,
                channel=Notification.Channel.WEBHOOK,
                recipients=[settings.PROPOSAL_WEBHOOK_URL],
                subject=subject[:200],
                body=body,
                payload=payload,
            )
        )
    for row in Notification.objects.bulk_create(rows):
        pk = row.pk
        transaction.on_commit(lambda pk=pk: queue.queue_notification(pk))


def notify_approvers(proposal: Proposal) -> None:
    approvers = (
        get_user_model()
        # The backend that holds permissions; the other one (login throttling) holds none.
        .objects.with_perm(
            "proposals.approve_proposal", backend="django.contrib.auth.backends.ModelBackend"
        )
        .exclude(pk=proposal.author_id)
        .exclude(email="")
        .order_by("username")
    )
    with translation.override(settings.NOTIFICATION_LANGUAGE):
        subject = _("Ready for approval: %(proposal)s") % {"proposal": proposal}
        body = _(
            "%(author)s's proposal %(proposal)s passed all its gates and waits for an approver."
        ) % {"author": proposal.author.get_username(), "proposal": proposal}
    body += f"\n\n{proposal.rationale}\n\n{proposal_url(proposal)}\n"
    _queue(
        proposal,
        recipients=[user.email for user in approvers],
        subject=subject,
        body=body,
        payload=_payload(proposal, subject, None),
    )


def notify_author(proposal: Proposal, message: str, decided_by=None) -> None:
    state = State(proposal.state)
    with translation.override(settings.NOTIFICATION_LANGUAGE):
        figures = {"state": capfirst(STATE_LABELS[state]), "proposal": proposal}
        if decided_by:
            figures["who"] = decided_by.get_username()
            subject = _("%(state)s by %(who)s: %(proposal)s") % figures
        else:
            subject = _("%(state)s by the gate checks: %(proposal)s") % figures
    body = f"{subject}\n\n{message}\n\n{proposal_url(proposal)}\n".replace("\n\n\n", "\n\n")
    _queue(
        proposal,
        recipients=[proposal.author.email] if proposal.author.email else [],
        subject=subject,
        body=body,
        payload=_payload(proposal, message, decided_by),
    )


def deliver(notification: Notification) -> None:
    """Send one notification; raises on failure so the task can retry."""
    if notification.channel == Notification.Channel.EMAIL:
        send_mail(
            notification.subject,
            notification.body,
            settings.DEFAULT_FROM_EMAIL,
            notification.recipients,
        )
        return
    request = urllib.request.Request(
        notification.recipients[0],
        data=json.dumps(notification.payload).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "gpu-colocation-console"},
        method="POST",
    )
    # urlopen raises HTTPError (an OSError) for any answer but 2xx, so the task retries it.
    with urllib.request.urlopen(request, timeout=settings.PROPOSAL_WEBHOOK_TIMEOUT_S):
        pass


def mark_sent(notification: Notification) -> None:
    notification.status = Notification.Status.SENT
    notification.sent_at = timezone.now()
    notification.save(update_fields=["status", "sent_at", "attempts", "last_error"])
