"""The operations demo on `make run`: the host ops-a100 (inventory.demo), the standing
policies the demo approver signed for it, and an approved off-peak reload of card 2's model a
few minutes after the seed, so that the demo shows the whole story (docs/operations.md, "The
demo's story") with the simulated actions of its agent's actions file."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model

from console.core.auditing import Action
from console.core.auditing.changes import open_change, record_created
from console.operations import off_peak, services
from console.operations.models import DefragPlan, DefragReload, StandingPolicy
from inventory.demo import ensure_operations_host
from inventory.models import Host

DEMO_APPROVER = "approver"  # inventory.demo.DEMO_ROLES
# The reload comes after card 0's degradation and card 1's MPS crash (console.launcher), in a
# window long enough for one reload to run and settle.
RELOAD_AFTER = dt.timedelta(minutes=4)
RELOAD_WINDOW = dt.timedelta(minutes=30)
RELOADED = "code-8b"


def ensure_operations_demo(now: dt.datetime) -> Host | None:
    """The operations demo's host and what it runs on; None when the host exists already."""
    approver = get_user_model().objects.get(username=DEMO_APPROVER)
    with open_change():
        host = ensure_operations_host()
        if host is None:
            return None
        for kind in (StandingPolicy.Kind.DEGRADATION, StandingPolicy.Kind.MPS_RESTART):
            services.do_sign_policy(acting_user=approver, host=host, kind=kind)
        _plan_reload(host, now, approver)
    return host


def _plan_reload(host: Host, now: dt.datetime, approver) -> DefragPlan:
    """What the planner would propose from 30 days of the fragmenting card's history, which a
    fresh demo host does not have yet: one reload, in a window that opens soon."""
    deployment = host.deployments.get(runtime_name=RELOADED)
    start = now + RELOAD_AFTER
    plan = DefragPlan.objects.create(
        host=host,
        window_start=start,
        window_end=start + RELOAD_WINDOW,
        basis={"demo": True, "window_hours": RELOAD_WINDOW.total_seconds() / 3600, "deferred": []},
    )
    DefragReload.objects.create(
        plan=plan, deployment=deployment, gpu=deployment.gpus.get(), order=0, not_before=start,
        reason="fragmentation_index", estimated_bytes=0,
    )  # fmt: skip
    record_created(plan, Action.DEFRAG_PLAN, None, host=host, comment="operations demo")
    return off_peak.do_decide_plan(plan, acting_user=approver, approve=True)
