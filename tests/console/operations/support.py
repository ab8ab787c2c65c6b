"""Objects the permission matrix needs for host operations."""

from django.utils import timezone

from console.operations import services
from console.operations.models import DefragPlan, StandingPolicy


def matrix_objects(personas, host, deployment, gpu) -> dict:
    deployment.runtime_name = deployment.runtime_name or "matrix-deployment"
    deployment.save(update_fields=["runtime_name"])
    asked = services.do_request_action(
        acting_user=personas["oncall"], host=host, action="restart", deployment=deployment
    )
    policy = services.do_sign_policy(
        acting_user=personas["approver"], host=host, kind=StandingPolicy.Kind.MPS_RESTART
    )
    refusal = services.do_set_refusal(gpu, reason_code="degradation")
    now = timezone.now()
    plan = DefragPlan.objects.create(host=host, window_start=now, window_end=now)
    return {
        "host_action": asked,
        "policy": policy,
        "refusal": refusal,
        "defrag_plan": plan,
        "deployment": deployment,
    }


def rows(Row, readers, editors):
    """The matrix rows of every operations view: managers see, never trigger."""
    approvers = {**editors(403, outsider=404), "approver": 302}
    return [
        Row(
            "host-operations",
            lambda o: f"/hosts/{o['host'].name}/operations/",
            "get",
            readers(outsider=404),
        ),
        Row(
            "host-action-request",
            lambda o: f"/hosts/{o['host'].name}/operations/actions/",
            "post",
            editors(302, outsider=404),
            lambda o: {"action": "restart", "deployment": o["deployment"].pk},
        ),
        Row(
            "host-action-approve",
            lambda o: f"/operations/actions/{o['host_action'].pk}/approve/",
            "post",
            approvers,
        ),
        Row(
            "host-action-reject",
            lambda o: f"/operations/actions/{o['host_action'].pk}/reject/",
            "post",
            approvers,
        ),
        Row(
            "policy-sign",
            lambda o: f"/hosts/{o['host'].name}/operations/policies/",
            "post",
            approvers,
            lambda o: {"kind": "degradation", "kv_floor_fraction": "0.5"},
        ),
        Row("policy-revoke", lambda o: f"/operations/policies/{o['policy'].pk}/revoke/", "post",
            approvers),
        Row("card-refusal-clear", lambda o: f"/operations/refusals/{o['refusal'].pk}/clear/",
            "post", approvers),
        Row("defrag-plan-decide", lambda o: f"/operations/off-peak/{o['defrag_plan'].pk}/decide/",
            "post", approvers, lambda o: {"decision": "approve"}),
    ]  # fmt: skip
