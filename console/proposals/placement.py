"""The host's placement before and after a proposal, drawn the way the host page draws it."""

from console.placement import diagram
from console.proposals.gate_checks import share_of
from console.proposals.models import Proposal
from console.proposals.placement_change import Placed, with_change
from inventory.models import Deployment
from inventory.placement_state import current_placement

MIB = 1024**2


def _label_of(deployment: Deployment, request: dict) -> str:
    names = {model["name"] for model in request["models"]}
    numbered = f"{deployment.served_model.name} #{deployment.pk}"
    return numbered if numbered in names else deployment.served_model.name


def planned(proposal: Proposal) -> tuple[dict, dict] | None:
    """The host's placement with the proposal applied; None while the cards are not known."""
    request, answer = current_placement(proposal.host)
    changes_one_here = (
        proposal.deployment_id
        and proposal.action != Proposal.Action.ADD
        and proposal.deployment.host_id == proposal.host_id
    )
    # What the change takes over from leaves the drawing as it leaves the gates' cards.
    leaving = [proposal.deployment] if changes_one_here else []
    leaving += proposal.replaces.exclude(status=Deployment.Status.STOPPED).select_related(
        "served_model"
    )
    drop = [_label_of(deployment, request) for deployment in leaving]
    if proposal.action == Proposal.Action.REMOVE:
        return with_change(request, answer, drop=drop)
    label = f"{proposal.served_model.name} (proposed)"
    if proposal.isolation_mode == Deployment.Isolation.MIG:
        piece = proposal.mig_slice
        add = Placed(
            label, piece.memory_bytes // MIB, (str(piece.gpu),), mig_start=piece.start_slot
        )
        return with_change(request, answer, drop=drop, add=add)
    targets = proposal.target_gpus()
    if not targets:
        return None
    add = Placed(
        label,
        share_of(proposal, len(targets)).total_bytes // MIB,
        tuple(str(gpu) for gpu in targets),
        alone=proposal.isolation_mode == Deployment.Isolation.GPU_GROUP,
    )
    return with_change(request, answer, drop=drop, add=add)


def drawings(proposal: Proposal) -> tuple[object | None, object | None]:
    """(before, after) drawings: kept from apply time once applied, else live."""
    if proposal.placement_before is not None:
        before = diagram.to_drawing(diagram.build(*proposal.placement_before))
        after = proposal.placement_after and diagram.to_drawing(
            diagram.build(*proposal.placement_after)
        )
        return before, after
    after = planned(proposal)
    return (
        diagram.to_drawing(diagram.build(*current_placement(proposal.host))),
        diagram.to_drawing(diagram.build(*after)) if after else None,
    )
