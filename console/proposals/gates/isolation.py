"""Gate 3, isolation: who shares the model's SMs and fault domain, and did anyone agree (pure).

- MIG: hardware partition, own memory and SMs: passes, unless other models share the same
  compute instance (MPS or time-slicing inside the instance): that is sharing again, and needs
  the acknowledgement. Models on sibling compute instances of the GPU instance have their own
  SMs but share its memory (gate 1 counts it once) and are named.
- GPU group: passes when the cards are the model's alone; a "group" that shares its cards
  with others is not one, and fails.
- MPS, or time-slicing beside other models, or target cards whose co-tenants' tail latency is
  measured to rise with their neighbours' load: the proposal must move to GPU groups or MIG,
  or carry an explicit acknowledgement of the *MPS is not hard isolation* note (who and when).
"""

from dataclasses import dataclass

from console.proposals.gates import Gate, GateOutcome, GateStatus, then
from inventory.analytics.reasons import Reason, as_stored, gettext_noop, register

MPS_NOTE = "mps-not-hard-isolation"

MESSAGES = register(
    {
        "gate.isolation.mig_alone": gettext_noop(
            "A MIG instance: its own memory and SMs, and hardware fault isolation."
        ),
        "gate.isolation.mig_siblings": gettext_noop(
            "{models:comma} on sibling compute instances share the GPU instance's memory."
        ),
        "gate.isolation.mig_acknowledged": gettext_noop(
            "{who} acknowledged “MPS is not hard isolation” at {when}: {models:comma} share "
            "the MIG compute instance."
        ),
        "gate.isolation.mig_shared": gettext_noop(
            "{models:comma} already run on this MIG compute instance: sharing it (MPS or "
            "time-slicing inside the instance) is not isolation. Use an instance of its own, "
            "or acknowledge the “MPS is not hard isolation” note."
        ),
        "gate.isolation.group_shared": gettext_noop(
            "GPU-group binding needs cards no other model uses, but {models:comma} run on "
            "them: pick free cards, or say how the model shares them."
        ),
        "gate.isolation.group_alone": gettext_noop(
            "GPU-group binding: the cards are the model's alone, a clear fault boundary."
        ),
        "gate.isolation.mps": gettext_noop(
            "MPS is not hard isolation: one client's fatal fault takes down every client on the GPU"
        ),
        "gate.isolation.mps.sentence": gettext_noop(
            "MPS is not hard isolation: one client's fatal fault takes down every client on "
            "the GPU."
        ),
        "gate.isolation.time_slicing": gettext_noop(
            "time-slicing shares the SMs with {models:comma}"
        ),
        "gate.isolation.time_slicing.sentence": gettext_noop(
            "Time-slicing shares the SMs with {models:comma}."
        ),
        "gate.isolation.interference": gettext_noop(
            "interference measured on the target cards: {deployment}: {explanation}"
        ),
        "gate.isolation.interference.sentence": gettext_noop(
            "Interference measured on the target cards: {deployment}: {explanation}."
        ),
        "gate.isolation.time_slicing_alone": gettext_noop(
            "Time-slicing on cards no other model uses and no interference measured."
        ),
        "gate.isolation.acknowledged": gettext_noop(
            "{who} acknowledged “MPS is not hard isolation” at {when} ({triggers})."
        ),
        "gate.isolation.acknowledged_sharing": gettext_noop(
            "{who} acknowledged “MPS is not hard isolation” at {when}; {models:comma} share "
            "the fault domain ({triggers})."
        ),
        "gate.isolation.use_groups": gettext_noop(
            "Use GPU groups or MIG, or acknowledge the “MPS is not hard isolation” note."
        ),
        "gate.isolation.needs": gettext_noop(
            "Needs GPU groups, MIG or an acknowledgement: {trigger}."
        ),
    }
)


@dataclass(frozen=True)
class InterferenceFinding:
    deployment: str
    explanation: Reason | str  # inventory.analytics.interference's


@dataclass(frozen=True)
class IsolationRequest:
    model: str
    mode: str  # Deployment.Isolation: gpu_group, mps, mig, time_slicing
    cotenants: tuple[str, ...]  # other models on the target cards (MIG neighbours excluded)
    interference: tuple[InterferenceFinding, ...]  # flagged on the target cards
    acknowledged_by: str = ""
    acknowledged_at: str = ""  # ISO 8601
    instance_cotenants: tuple[str, ...] = ()  # MIG: other models on the same compute instance
    gpu_instance_siblings: tuple[str, ...] = ()  # MIG: models on sibling compute instances


def _trigger(code: str, **params) -> tuple[Reason, Reason]:
    """A reason to share no further: as a clause of the summary, and as a sentence of its own."""
    return Reason(f"gate.isolation.{code}", params), Reason(
        f"gate.isolation.{code}.sentence", params
    )


def evaluate_isolation(request: IsolationRequest) -> GateOutcome:
    numbers = {
        "mode": request.mode,
        "cotenants": list(request.cotenants),
        "interference": [
            {"deployment": f.deployment, "explanation": as_stored(f.explanation)}
            for f in request.interference
        ],
        "acknowledged_by": request.acknowledged_by,
        "acknowledged_at": request.acknowledged_at,
    }
    numbers["instance_cotenants"] = list(request.instance_cotenants)
    numbers["gpu_instance_siblings"] = list(request.gpu_instance_siblings)
    sharing = list(request.cotenants)
    acknowledged = {"who": request.acknowledged_by, "when": request.acknowledged_at}
    if request.mode == "mig":
        siblings = (
            (
                Reason(
                    "gate.isolation.mig_siblings", {"models": list(request.gpu_instance_siblings)}
                ),
            )
            if request.gpu_instance_siblings
            else ()
        )
        inside = list(request.instance_cotenants)
        if not request.instance_cotenants:
            return GateOutcome(
                Gate.ISOLATION,
                GateStatus.PASS,
                then(Reason("gate.isolation.mig_alone"), *siblings),
                numbers=numbers,
            )
        if request.acknowledged_by:
            summary = then(
                Reason("gate.isolation.mig_acknowledged", {**acknowledged, "models": inside}),
                *siblings,
            )
            return GateOutcome(Gate.ISOLATION, GateStatus.PASS, summary, (), numbers,
                               runbook_slug=MPS_NOTE)  # fmt: skip
        reason = Reason("gate.isolation.mig_shared", {"models": inside})
        return GateOutcome(Gate.ISOLATION, GateStatus.FAIL, reason, (reason,), numbers,
                           runbook_slug=MPS_NOTE)  # fmt: skip
    if request.mode == "gpu_group":
        if request.cotenants:
            reason = Reason("gate.isolation.group_shared", {"models": sharing})
            return GateOutcome(Gate.ISOLATION, GateStatus.FAIL, reason, (reason,), numbers)
        return GateOutcome(
            Gate.ISOLATION, GateStatus.PASS, Reason("gate.isolation.group_alone"), numbers=numbers
        )

    triggers = []
    if request.mode == "mps":
        triggers.append(_trigger("mps"))
    elif request.cotenants:
        triggers.append(_trigger("time_slicing", models=sharing))
    triggers += [
        _trigger("interference", deployment=f.deployment, explanation=f.explanation)
        for f in request.interference
    ]
    if not triggers:
        return GateOutcome(
            Gate.ISOLATION,
            GateStatus.PASS,
            Reason("gate.isolation.time_slicing_alone"),
            numbers=numbers,
        )
    clauses = [clause for clause, _ in triggers]
    if request.acknowledged_by:
        summary = (
            Reason(
                "gate.isolation.acknowledged_sharing",
                {**acknowledged, "models": sharing, "triggers": clauses},
            )
            if sharing
            else Reason("gate.isolation.acknowledged", {**acknowledged, "triggers": clauses})
        )
        return GateOutcome(Gate.ISOLATION, GateStatus.PASS, summary, (), numbers,
                           runbook_slug=MPS_NOTE)  # fmt: skip
    reasons = (*(sentence for _, sentence in triggers), Reason("gate.isolation.use_groups"))
    summary = Reason("gate.isolation.needs", {"trigger": clauses[0]})
    return GateOutcome(Gate.ISOLATION, GateStatus.FAIL, summary, reasons, numbers,
                       runbook_slug=MPS_NOTE)  # fmt: skip
