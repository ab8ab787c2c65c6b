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

from console.proposals.gates import Gate, GateOutcome, GateStatus

MPS_NOTE = "mps-not-hard-isolation"


@dataclass(frozen=True)
class InterferenceFinding:
    deployment: str
    explanation: str


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


def evaluate_isolation(request: IsolationRequest) -> GateOutcome:
    numbers = {
        "mode": request.mode,
        "cotenants": list(request.cotenants),
        "interference": [
            {"deployment": f.deployment, "explanation": f.explanation} for f in request.interference
        ],
        "acknowledged_by": request.acknowledged_by,
        "acknowledged_at": request.acknowledged_at,
    }
    numbers["instance_cotenants"] = list(request.instance_cotenants)
    numbers["gpu_instance_siblings"] = list(request.gpu_instance_siblings)
    sharing = ", ".join(request.cotenants)
    if request.mode == "mig":
        siblings = (
            f" {', '.join(request.gpu_instance_siblings)} on sibling compute instances share "
            "the GPU instance's memory."
            if request.gpu_instance_siblings
            else ""
        )
        inside = ", ".join(request.instance_cotenants)
        if not request.instance_cotenants:
            return GateOutcome(
                Gate.ISOLATION,
                GateStatus.PASS,
                "A MIG instance: its own memory and SMs, and hardware fault isolation." + siblings,
                numbers=numbers,
            )
        if request.acknowledged_by:
            summary = (
                f"{request.acknowledged_by} acknowledged “MPS is not hard isolation” at "
                f"{request.acknowledged_at}: {inside} share the MIG compute instance." + siblings
            )
            return GateOutcome(Gate.ISOLATION, GateStatus.PASS, summary, (), numbers,
                               runbook_slug=MPS_NOTE)  # fmt: skip
        reason = (
            f"{inside} already run on this MIG compute instance: sharing it (MPS or "
            "time-slicing inside the instance) is not isolation. Use an instance of its own, "
            "or acknowledge the “MPS is not hard isolation” note."
        )
        return GateOutcome(Gate.ISOLATION, GateStatus.FAIL, reason, (reason,), numbers,
                           runbook_slug=MPS_NOTE)  # fmt: skip
    if request.mode == "gpu_group":
        if request.cotenants:
            reason = (
                f"GPU-group binding needs cards no other model uses, but {sharing} "
                "run on them: pick free cards, or say how the model shares them."
            )
            return GateOutcome(Gate.ISOLATION, GateStatus.FAIL, reason, (reason,), numbers)
        return GateOutcome(
            Gate.ISOLATION,
            GateStatus.PASS,
            "GPU-group binding: the cards are the model's alone, a clear fault boundary.",
            numbers=numbers,
        )

    triggers = []
    if request.mode == "mps":
        triggers.append(
            "MPS is not hard isolation: one client's fatal fault takes down every client on the GPU"
        )
    elif request.cotenants:
        triggers.append(f"time-slicing shares the SMs with {sharing}")
    triggers += [
        f"interference measured on the target cards: {f.deployment}: {f.explanation}"
        for f in request.interference
    ]
    if not triggers:
        return GateOutcome(
            Gate.ISOLATION,
            GateStatus.PASS,
            "Time-slicing on cards no other model uses and no interference measured.",
            numbers=numbers,
        )
    if request.acknowledged_by:
        summary = (
            f"{request.acknowledged_by} acknowledged “MPS is not hard isolation” at "
            f"{request.acknowledged_at}"
            + (f"; {sharing} share the fault domain" if sharing else "")
            + f" ({'; '.join(triggers)})."
        )
        return GateOutcome(Gate.ISOLATION, GateStatus.PASS, summary, (), numbers,
                           runbook_slug=MPS_NOTE)  # fmt: skip
    reasons = (
        *(t[0].upper() + t[1:] + "." for t in triggers),
        "Use GPU groups or MIG, or acknowledge the “MPS is not hard isolation” note.",
    )
    summary = f"Needs GPU groups, MIG or an acknowledgement: {triggers[0]}."
    return GateOutcome(Gate.ISOLATION, GateStatus.FAIL, summary, reasons, numbers,
                       runbook_slug=MPS_NOTE)  # fmt: skip
