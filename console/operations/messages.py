"""Host action requests and outcomes on the wire: signed JSON bodies, like the batches.

A request goes to the host's agent queue as the `agent.run_action` task; the agent reports
the outcome as the `operations.record_action_outcome` task, signed with the same secret.
"""

from __future__ import annotations

import json
import logging

from celery import current_app
from django.conf import settings

from inventory.collection import agent_queue
from inventory.models import Host
from inventory.telemetry import host_actions as ha
from inventory.wire import signing

log = logging.getLogger(__name__)


def request_body(action) -> str:
    request = ha.ActionRequest(
        id=str(action.request_id),
        host=action.host.name,
        action=action.action,
        deployment=action.deployment.runtime_name if action.deployment else None,
        params=action.params,
        expires_at=action.expires_at.timestamp(),
    )
    return signing.encode(request.as_message()).decode()


def publish(action) -> None:
    """Send the request to the host's agent (after the commit that decided it)."""
    body = request_body(action)
    current_app.send_task(
        "agent.run_action",
        args=[body, signing.sign(action.host.agent_secret, body.encode())],
        queue=agent_queue(action.host),
        expires=settings.OPERATIONS_ACTION_TTL_S,
    )


def verified_outcome(body: str, signature: str | None) -> dict | None:
    """The outcome, if its host's secret signed it; None (and a warning) otherwise."""
    try:
        outcome = json.loads(body)
    except (TypeError, ValueError):
        log.warning("an action outcome that is not JSON was dropped")
        return None
    host_name = outcome.get("host") if isinstance(outcome, dict) else None
    host = Host.objects.filter(name=host_name).first() if isinstance(host_name, str) else None
    if host is None or not signing.verify(host.agent_secret, body.encode(), signature):
        log.warning("an action outcome not signed by its host (%r) was dropped", host_name)
        return None
    if outcome.get("state") not in ha.OUTCOME_STATES:
        log.warning("an action outcome with state %r was dropped", outcome.get("state"))
        return None
    return outcome
