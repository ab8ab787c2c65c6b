"""Gate 1, the memory ledger: does the change fit on every card it touches (pure)?

For each target card::

    weights / cards + KV per card + CUDA context + workspace   (this card's share)
  + co-tenants' demand on the card          (measured: their joint peak, or their own figures)
  + the card's fragmentation peak                               (allocator-held, not in use)
  + headroom
  <= total - driver reserved

KV per card comes from the model's architecture (``inventory.analytics.kv``): an MLA latent is
whole on every tensor-parallel card, GQA heads are split and replicated past the head count.
Every process holds a CUDA context and library workspaces outside its allocator; NVML counts
them, so the gate does: measured (NVML used - allocator reserved) for co-tenants with
telemetry, the card type's estimate otherwise (``inventory.analytics.context``), labelled.

Co-tenants with history count at their **joint peak**: the highest sum of their demand at one
moment over the window (the co-peak), not the sum of their P95s, which hides peaks that
collide and over-counts peaks that never meet. Co-tenants without history add their own
figures. Fragmentation blocks a card only when it stayed red (the index held for a share of
the window, counting only moments whose pools held a minimum of free bytes); an index from the
fallback statistic (inactive split / reserved) is on another scale and is labelled so.

Capacity never adds across cards: a model that needs more than any one card has fails, however
much the host has free in total. A card whose framework fragmentation is red fails whatever its
totals say: "nvidia-smi total green, framework fragmentation red" means do not add a model.
"""

from dataclasses import dataclass, field

from console.proposals.gates import Gate, GateOutcome, GateStatus, then
from inventory.analytics.context import ContextOverhead
from inventory.analytics.kv import CardKv
from inventory.analytics.reasons import Reason, as_stored, gettext_noop, ngettext_lazy, register

DEFRAGMENT_NOTE = "defragment-off-peak-reload"
OOM_NOTE = "oom-triage"

MESSAGES = register(
    {
        "gate.memory.breakdown": gettext_noop(
            "weights {weights:gib} + KV {kv:gib} + CUDA context {context:gib} + workspace "
            "{workspace:gib} + co-tenants {tenants:gib} (of which CUDA context "
            "{tenants_context:gib}) + fragmentation {fragmentation:gib} + headroom "
            "{headroom:gib} = {need:gib} of {usable:gib} usable"
        ),
        "gate.memory.breakdown_joint": gettext_noop(
            "weights {weights:gib} + KV {kv:gib} + CUDA context {context:gib} + workspace "
            "{workspace:gib} + co-tenants {tenants:gib} at their joint peak (of which CUDA "
            "context {tenants_context:gib}) + fragmentation {fragmentation:gib} + headroom "
            "{headroom:gib} = {need:gib} of {usable:gib} usable"
        ),
        "gate.memory.short": gettext_noop("{card} is short by {short:gib}: {breakdown}."),
        "gate.memory.fragmentation_red": gettext_noop(
            "{card}: framework fragmentation stayed red (index {index:.2f}, held for a share of "
            "the last 7 days; peak {peak:.2f}), whatever nvidia-smi's totals say; reload "
            "off-peak before adding a model."
        ),
        "gate.memory.fragmentation_red_fallback": gettext_noop(
            "{card}: framework fragmentation stayed red (index {index:.2f} on the fallback "
            "scale (inactive split / reserved, not comparable to 1 - largest free block / "
            "free), held for a share of the last 7 days; peak {peak:.2f}), whatever "
            "nvidia-smi's totals say; reload off-peak before adding a model."
        ),
        "gate.memory.refused": gettext_noop(
            "{cards:comma} refuses new loads until on-call clears it (it ran out of memory)."
        ),
        "gate.memory.solver_refused": gettext_noop("The solver refused the request: {error}."),
        "gate.memory.solver_no_place": gettext_noop("The solver found no place: {reason}."),
        "gate.memory.estimates_note": gettext_noop(
            "No telemetry for {cards:comma}: the co-tenants' own figures (weights + KV per card "
            "+ CUDA context + workspace) stand in for their measured P95, and fragmentation "
            "counts as zero. These are estimates."
        ),
        "gate.memory.no_card": gettext_noop("No single card can hold {model}."),
        "gate.memory.no_single_card": gettext_noop(
            "No single card can hold {model}: the best, {card}, would need {need:gib} of "
            "{usable:gib} usable, although the host has {free:gib} free in total (capacity "
            "does not add across cards)."
        ),
        "gate.memory.does_not_fit": gettext_noop("Does not fit on {cards:comma}: {first}"),
        "gate.memory.does_not_fit_chosen": gettext_noop(
            "Does not fit on {cards:comma} (chosen by the solver: {chosen_by}): {first}"
        ),
        "gate.memory.fits": gettext_noop(
            "Fits on {cards:comma}; tightest is {card} with {margin:gib} to spare ({breakdown})."
        ),
        "gate.memory.fits_chosen": gettext_noop(
            "Fits on {cards:comma} (chosen by the solver: {chosen_by}); tightest is {card} with "
            "{margin:gib} to spare ({breakdown})."
        ),
        "gate.memory.estimates": gettext_noop("Figures for cards without telemetry are estimates."),
        "gate.memory.recent_ooms": gettext_noop(
            "Recent OOMs on the target cards ({ooms}): read the triage first."
        ),
        # What a co-tenant's figure is (``Tenant.basis``).
        "gate.memory.basis.measured": ngettext_lazy(
            "P95 measured, {count} day, with what NVML counts outside the allocator",
            "P95 measured, {count} days, with what NVML counts outside the allocator",
        ),
        "gate.memory.basis.estimate": gettext_noop(
            "estimate: weights + KV per card + CUDA context + workspace"
        ),
        "gate.memory.basis.slice_estimate": gettext_noop("estimate"),
        "gate.memory.basis.sibling_estimate": gettext_noop(
            "estimate, on {profile} of the same GPU instance"
        ),
        # How the solver chose the cards (``chosen_by``): its method, formulation and time.
        "gate.memory.chosen_by": gettext_noop("{method} ({formulation}), {solve_ms} ms"),
        "gate.memory.method.greedy": gettext_noop("greedy"),
        "gate.memory.method.exact": gettext_noop("exact"),
        "gate.memory.formulation.best-fit-decreasing": gettext_noop("best-fit-decreasing"),
        "gate.memory.formulation.arc-flow": gettext_noop("arc-flow"),
        "gate.memory.formulation.cp-sat-assignment": gettext_noop("CP-SAT assignment"),
    }
)


@dataclass(frozen=True)
class Tenant:
    name: str
    demand_bytes: int
    basis: Reason | str  # gate.memory.basis.*: measured, or an estimate from its own figures
    # Of the demand, what the process holds outside its allocator (CUDA context, workspaces).
    context_bytes: int = 0
    context_source: str = ""  # a code of inventory.analytics.context.SOURCE_LABELS
    measured: bool = False  # from the card's history: counted in the joint peak


@dataclass(frozen=True)
class CardBudget:
    card: str
    total_bytes: int
    driver_reserved_bytes: int
    tenants: tuple[Tenant, ...]  # everyone else on the card, after the change
    fragmentation_peak_bytes: int
    fragmentation_index_peak: float | None
    fragmentation_status: str  # green / amber / red, of the sustained index
    measured: bool  # False: no telemetry, every figure is an estimate
    # The measured tenants' joint peak (co-peak) over the window; None: no history.
    measured_joint_peak_bytes: int | None = None
    fragmentation_index_sustained: float | None = None
    fragmentation_scale: str = "largest_free_block"  # or "inactive_split_over_reserved"

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes - self.driver_reserved_bytes

    @property
    def tenants_bytes(self) -> int:
        if self.measured_joint_peak_bytes is None:
            return sum(tenant.demand_bytes for tenant in self.tenants)
        unmeasured = sum(t.demand_bytes for t in self.tenants if not t.measured)
        return self.measured_joint_peak_bytes + unmeasured

    @property
    def sum_of_p95_bytes(self) -> int:
        return sum(tenant.demand_bytes for tenant in self.tenants)

    def free_bytes(self, headroom_bytes: int) -> int:
        """What a new tenant could take here: usable minus everyone's demand and the reserve."""
        return (
            self.usable_bytes - self.tenants_bytes - self.fragmentation_peak_bytes - headroom_bytes
        )


@dataclass(frozen=True)
class Share:
    """The proposed deployment's memory on each of its cards."""

    weights_bytes: int
    kv_bytes: int
    workspace_bytes: int
    context_bytes: int = 0  # its process's CUDA context on the card (an estimate)
    kv_how: str = "shape"  # inventory.analytics.kv.CardKv.how
    context_source: str = ""

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.context_bytes + self.workspace_bytes

    @classmethod
    def per_card(
        cls,
        weights: int,
        kv: CardKv,
        workspace: int,
        cards: int,
        context: ContextOverhead | None = None,
    ) -> "Share":
        """Weights split over the cards; KV as each card holds it (already per card)."""
        return cls(
            -(-weights // max(1, cards)),
            kv.bytes,
            workspace,
            context.bytes if context else 0,
            kv.how,
            context.source if context else "",
        )


@dataclass(frozen=True)
class MemoryRequest:
    model: str
    share: Share
    headroom_bytes: int
    targets: tuple[CardBudget, ...]  # empty when the solver found no place
    host_cards: tuple[CardBudget, ...]  # every card of the host, for the per-card picture
    chosen_by: Reason | None = None  # how the solver chose (gate.memory.chosen_by), if it did
    unplaced_reason: Reason | str = ""
    recent_ooms: dict[str, int] = field(default_factory=dict)  # card -> OOMs in the window


def _row(card: CardBudget, share: Share, headroom: int) -> dict:
    need = share.total_bytes + card.tenants_bytes + card.fragmentation_peak_bytes + headroom
    return {
        "card": card.card,
        "total_bytes": card.total_bytes,
        "driver_reserved_bytes": card.driver_reserved_bytes,
        "usable_bytes": card.usable_bytes,
        "weights_bytes": share.weights_bytes,
        "kv_bytes": share.kv_bytes,
        "workspace_bytes": share.workspace_bytes,
        "context_bytes": share.context_bytes,
        "context_source": share.context_source,
        "kv_how": share.kv_how,
        "tenants": [
            {
                "name": t.name,
                "demand_bytes": t.demand_bytes,
                "basis": as_stored(t.basis),
                "context_bytes": t.context_bytes,
                "context_source": t.context_source,
            }
            for t in card.tenants
        ],
        "tenants_bytes": card.tenants_bytes,
        "tenants_basis": "joint_peak" if card.measured_joint_peak_bytes is not None else "sum",
        "tenants_sum_of_p95_bytes": card.sum_of_p95_bytes,
        "tenants_joint_peak_bytes": card.measured_joint_peak_bytes,
        "tenants_context_bytes": sum(t.context_bytes for t in card.tenants),
        "fragmentation_peak_bytes": card.fragmentation_peak_bytes,
        "fragmentation_index_peak": card.fragmentation_index_peak,
        "fragmentation_index_sustained": card.fragmentation_index_sustained,
        "fragmentation_scale": card.fragmentation_scale,
        "fragmentation_status": card.fragmentation_status,
        "headroom_bytes": headroom,
        "need_bytes": need,
        "margin_bytes": card.usable_bytes - need,
        "fits": need <= card.usable_bytes,
        "fragmentation_red": card.fragmentation_status == "red",
        "measured": card.measured,
    }


def _breakdown(row: dict) -> Reason:
    figures = {
        "weights": row["weights_bytes"],
        "kv": row["kv_bytes"],
        "context": row["context_bytes"],
        "workspace": row["workspace_bytes"],
        "tenants": row["tenants_bytes"],
        "tenants_context": row["tenants_context_bytes"],
        "fragmentation": row["fragmentation_peak_bytes"],
        "headroom": row["headroom_bytes"],
        "need": row["need_bytes"],
        "usable": row["usable_bytes"],
    }
    joint = row["tenants_basis"] == "joint_peak"
    return Reason("gate.memory.breakdown_joint" if joint else "gate.memory.breakdown", figures)


def _card_reasons(row: dict) -> list[Reason]:
    reasons = []
    if not row["fits"]:
        reasons.append(
            Reason(
                "gate.memory.short",
                {"card": row["card"], "short": -row["margin_bytes"], "breakdown": _breakdown(row)},
            )
        )
    if row["fragmentation_red"]:
        index = row["fragmentation_index_sustained"]
        if index is None:
            index = row["fragmentation_index_peak"]
        fallback = row["fragmentation_scale"] == "inactive_split_over_reserved"
        reasons.append(
            Reason(
                "gate.memory.fragmentation_red_fallback"
                if fallback
                else "gate.memory.fragmentation_red",
                {"card": row["card"], "index": index, "peak": row["fragmentation_index_peak"]},
            )
        )
    return reasons


def refused(cards: list[str]) -> GateOutcome:
    """Cards that refuse new loads (the degradation ladder set them after an OOM)."""
    reason = Reason("gate.memory.refused", {"cards": cards})
    return GateOutcome(
        Gate.MEMORY, GateStatus.FAIL, reason, (reason,), {"refused": ", ".join(cards)}
    )


def evaluate_memory(request: MemoryRequest) -> GateOutcome:
    headroom = request.headroom_bytes
    host_free = sum(max(0, card.free_bytes(headroom)) for card in request.host_cards)
    numbers = {
        "model": request.model,
        "share_bytes": request.share.total_bytes,
        "headroom_bytes": headroom,
        # Shown beside the per-card rows to make the point: this sum is not a budget.
        "host_free_total_bytes": host_free,
        "chosen_by": request.chosen_by.to_json() if request.chosen_by else "",
    }
    estimates = [card.card for card in request.host_cards if not card.measured]
    evidence = {
        "recent_ooms": request.recent_ooms,
        "estimated_cards": estimates,
        "estimates_note": (
            Reason("gate.memory.estimates_note", {"cards": estimates}).to_json()
            if estimates
            else ""
        ),
    }

    if not request.targets:
        rows = [_row(card, request.share, headroom) for card in request.host_cards]
        numbers["cards"] = rows
        best = max(rows, key=lambda row: row["margin_bytes"], default=None)
        if best is None:
            summary = Reason("gate.memory.no_card", {"model": request.model})
        else:
            summary = Reason(
                "gate.memory.no_single_card",
                {
                    "model": request.model,
                    "card": best["card"],
                    "need": best["need_bytes"],
                    "usable": best["usable_bytes"],
                    "free": host_free,
                },
            )
        reasons = [request.unplaced_reason] if request.unplaced_reason else []
        reasons += [reason for row in rows for reason in _card_reasons(row)]
        return GateOutcome(Gate.MEMORY, GateStatus.FAIL, summary, tuple(reasons),
                           numbers, evidence)  # fmt: skip

    rows = [_row(card, request.share, headroom) for card in request.targets]
    numbers["cards"] = rows
    reasons = tuple(reason for row in rows for reason in _card_reasons(row))
    tightest = min(rows, key=lambda row: row["margin_bytes"])
    chosen = {"chosen_by": request.chosen_by} if request.chosen_by else {}
    if reasons:
        failing = [row["card"] for row in rows if not row["fits"] or row["fragmentation_red"]]
        summary = Reason(
            "gate.memory.does_not_fit_chosen" if chosen else "gate.memory.does_not_fit",
            {"cards": failing, **chosen, "first": reasons[0]},
        )
        slug = DEFRAGMENT_NOTE if all(row["fits"] for row in rows) else ""
        return GateOutcome(Gate.MEMORY, GateStatus.FAIL, summary, reasons, numbers, evidence,
                           runbook_slug=slug)  # fmt: skip
    # A card that fits on paper but has been running out of memory needs its OOMs explained.
    slug = OOM_NOTE if any(request.recent_ooms.get(row["card"]) for row in rows) else ""
    fits = Reason(
        "gate.memory.fits_chosen" if chosen else "gate.memory.fits",
        {
            "cards": [row["card"] for row in rows],
            **chosen,
            "card": tightest["card"],
            "margin": tightest["margin_bytes"],
            "breakdown": _breakdown(tightest),
        },
    )
    notes = []
    if estimates:
        notes.append(Reason("gate.memory.estimates"))
    if slug:
        ooms = ", ".join(f"{card} {n}" for card, n in request.recent_ooms.items() if n)
        notes.append(Reason("gate.memory.recent_ooms", {"ooms": ooms}))
    return GateOutcome(Gate.MEMORY, GateStatus.PASS, then(fits, *notes), (), numbers, evidence,
                       runbook_slug=slug)  # fmt: skip
