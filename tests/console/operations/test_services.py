"""Host operations in the console: authority, four eyes, outcomes, the degradation path
without a standing policy, the OOM trigger and the page (no worker processes)."""

import json

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from console.core.auditing import Action
from console.core.auditing.models import AuditEntry
from console.operations import degradation, messages, services, watch
from console.operations.models import DegradationRun, HostAction, StandingPolicy
from console.operations.tasks import record_action_outcome
from console.proposals.models import Proposal
from inventory.models import CardRefusal, Deployment, Event
from inventory.wire import signing
from tests.factories import GIB

pytestmark = pytest.mark.django_db


def test_an_action_waits_for_a_second_person(personas, card):
    gpu, _, cheap = card
    asked = services.do_request_action(
        acting_user=personas["approver"], host=gpu.host, action="restart", deployment=cheap
    )
    assert asked.state == HostAction.State.AWAITING_APPROVAL
    with pytest.raises(services.FourEyesError):
        services.do_approve_action(asked, acting_user=personas["approver"])
    with pytest.raises(PermissionDenied):
        services.do_approve_action(asked, acting_user=personas["oncall"])
    with pytest.raises(PermissionDenied):
        services.do_request_action(
            acting_user=personas["manager"], host=gpu.host, action="restart", deployment=cheap
        )
    assert AuditEntry.objects.filter(
        action=Action.HOST_ACTION_REQUEST, object_id=str(asked.pk), actor_name="approver"
    ).exists()


@pytest.mark.parametrize(
    ("action", "params"),
    [
        ("reboot", {}),
        ("reload_with", {}),
        ("reload_with", {"kv_bytes": -1}),
        ("reload_with", {"kv_bytes": 1, "mem_fraction": 0.5}),
        ("restart", {"kv_bytes": 1}),
        ("mps_restart", {"card_index": 9}),  # no such card on the host
    ],
)
def test_an_action_that_could_never_run_is_refused_before_it_is_sent(
    personas, card, action, params
):
    gpu, _, cheap = card
    with pytest.raises(ValidationError):
        services.do_request_action(
            acting_user=personas["oncall"], host=gpu.host, action=action,
            deployment=None if action == "mps_restart" else cheap, params=params,
        )  # fmt: skip
    assert not HostAction.objects.exists()


def _outcome(action, secret, **fields):
    body = signing.encode(
        {"request_id": str(action.request_id), "host": action.host.name, "state": "succeeded",
         "output_tail": "ok", **fields}
    ).decode()  # fmt: skip
    return body, signing.sign(secret, body.encode())


def test_an_outcome_counts_only_when_its_host_signed_it(personas, card):
    gpu, _, cheap = card
    asked = services.do_request_action(
        acting_user=personas["oncall"], host=gpu.host, action="restart", deployment=cheap
    )
    record_action_outcome(*_outcome(asked, "someone else's"))
    asked.refresh_from_db()
    assert asked.state == HostAction.State.AWAITING_APPROVAL
    record_action_outcome(*_outcome(asked, gpu.host.agent_secret))
    record_action_outcome(*_outcome(asked, gpu.host.agent_secret, state="failed"))
    asked.refresh_from_db()
    assert (asked.state, asked.deliveries, asked.output_tail) == ("succeeded", 2, "ok")


def test_a_request_body_names_the_action_never_a_command(personas, card):
    gpu, _, cheap = card
    policy = services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION
    )
    asked = services.do_request_action(
        acting_user=None, host=gpu.host, action="reload_with", deployment=cheap,
        params={"kv_bytes": 6 * GIB}, policy=policy,
    )  # fmt: skip
    body = json.loads(messages.request_body(asked))
    assert set(body) == {"id", "host", "action", "deployment", "params", "expires_at"}
    assert (body["action"], body["deployment"], body["params"]) == (
        "reload_with",
        "batch",
        {"kv_bytes": 6 * GIB},
    )


def test_without_a_standing_policy_degradation_opens_a_proposal_and_waits(personas, card):
    gpu, _, cheap = card
    watch.watch(timezone.now())
    run = DegradationRun.objects.get(gpu=gpu)
    assert run.state == DegradationRun.State.AWAITING_APPROVAL
    assert run.plan[0]["kind"] == "shrink_kv" and run.plan[0]["deployment_id"] == cheap.pk
    shrink = run.actions.get()
    assert (shrink.state, shrink.params) == ("awaiting_approval", {"kv_bytes": 6 * GIB})
    proposal = run.proposal
    assert (proposal.action, proposal.deployment, proposal.kv_reservation_bytes) == (
        Proposal.Action.RESIZE,
        cheap,
        6 * GIB,
    )
    assert shrink.proposal == proposal
    # The watch runs again: the card is already being degraded, nothing new starts.
    watch.watch(timezone.now())
    assert DegradationRun.objects.count() == 1


def test_an_oom_degrades_a_card_that_looks_fine_now(personas, card):
    gpu = card[0]
    services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION,
        params={"allow_evict": False, "kv_floor_fraction": 0.9},
    )  # fmt: skip
    event = Event.objects.create(
        host=gpu.host, gpu=gpu, kind=Event.Kind.OOM, at=timezone.now(),
        detail={"requested_bytes": 6 * GIB, "free_bytes": GIB, "pid": 200},
        batch_id="00000000-0000-4000-8000-000000000009", position=0,
    )  # fmt: skip
    run = degradation.on_card_over_limit(gpu.pk, event_pk=event.pk)
    assert run.trigger == DegradationRun.Trigger.OOM
    assert run.used_before_bytes >= 85 * GIB  # what the failed allocation needed counts
    assert [step["kind"] for step in run.plan] == ["shrink_kv", "refuse"]
    assert CardRefusal.objects.filter(gpu=gpu, cleared_at__isnull=True).exists()
    assert run.actions.get().state == HostAction.State.SENT  # the standing policy allows it
    assert degradation.on_card_over_limit(gpu.pk, event_pk=event.pk) == run


def _oom(gpu, position=0):
    return Event.objects.create(
        host=gpu.host, gpu=gpu, kind=Event.Kind.OOM, at=timezone.now(),
        detail={"requested_bytes": 6 * GIB, "free_bytes": GIB, "pid": 200},
        batch_id=f"00000000-0000-4000-8000-00000000001{position}", position=position,
    )  # fmt: skip


def test_a_tenant_without_a_runtime_name_is_refused_not_a_failed_watch(personas, card):
    # Seen on a real host's end-to-end run: a deployment registered without a runtime name was
    # the plan's target, the action could not be asked for, and the whole watch failed.
    gpu, _, cheap = card
    Deployment.objects.filter(pk=cheap.pk).update(runtime_name="")
    services.do_sign_policy(
        acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION,
        params={"allow_evict": False, "kv_floor_fraction": 0.9},
    )  # fmt: skip
    _oom(gpu)
    reactions = watch.watch(timezone.now())
    assert reactions["oom_reactions"] == 1
    run = DegradationRun.objects.get(gpu=gpu)
    assert not run.actions.exists()  # nothing the agent could act on
    assert CardRefusal.objects.filter(gpu=gpu, cleared_at__isnull=True).exists()


def test_one_failing_reaction_leaves_the_other_events_handled(personas, card, monkeypatch):
    gpu = card[0]
    _oom(gpu)
    down = Event.objects.create(
        host=gpu.host, gpu=gpu, kind=Event.Kind.MPS_SERVER_DOWN, at=timezone.now(),
        detail={}, batch_id="00000000-0000-4000-8000-000000000019", position=1,
    )  # fmt: skip

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in one reaction")

    seen = []
    monkeypatch.setattr(degradation, "on_card_over_limit", broken)
    monkeypatch.setattr(watch.mps_recovery, "on_mps_server_down", lambda pk: seen.append(pk))
    reactions = watch.watch(timezone.now())
    assert seen == [down.pk]
    assert set(reactions) >= {"over_limit", "settled", "mps", "reloads"}  # the watch went on


def test_the_operations_page_shows_and_answers_hostile_input_with_400(client_as, personas, card):
    gpu, _, cheap = card
    client = client_as("oncall")
    page = client.get(f"/hosts/{gpu.host.name}/operations/")
    assert page.status_code == 200
    assert b"Host actions" in page.content and b"MPS servers" in page.content
    for data in (
        {"action": "restart; reboot", "deployment": cheap.pk},
        {"action": "reload_with", "deployment": cheap.pk, "kv_bytes": "lots"},
        {"action": "restart", "deployment": "x'--"},
        {"action": "restart", "deployment": 10**9},
    ):
        answer = client.post(f"/hosts/{gpu.host.name}/operations/actions/", data)
        assert answer.status_code == 400, data
    assert not HostAction.objects.exists()
    manager = client_as("manager").get(f"/hosts/{gpu.host.name}/operations/")
    assert manager.status_code == 200
    assert b'id="ask-action"' not in manager.content  # a manager sees, never triggers
