"""Gate 5, engine settings: do the engines sharing a card leave each other room (pure)?

Each engine on a card claims a share of it by its own settings, whatever the console reserves:

- vLLM ``--gpu-memory-utilization`` (its default depends on the version, see
  ``vllm_default_utilization``): a per-instance share of the card's total
  memory; two instances on one card each take their own share, so they must add up ("set it
  to 0.5 for each of two instances", vLLM docs). ``--kv-cache-memory-bytes`` (per GPU) replaces
  it for the KV pool; the claim is then weights + that pool + context and workspace.
- SGLang ``--mem-fraction-static``: weights and KV pool as a share of the card; its default is
  derived from the card and TP size, so it must be stated.
- TGI ``--cuda-memory-fraction`` (default 1.0: the whole card).
- Ollama: no fraction; it holds weights + the context's KV + ``OLLAMA_GPU_OVERHEAD``.

On every target card the claims must add up to at most ``1 - headroom / card memory``, and
the on-demand engines' claims (Ollama and any engine that does not preallocate, see
inventory.analytics.memory_pressure) to at most the memory limit (DEGRADATION_LIMIT, the
card-memory alert's share) of what the preallocating engines leave: at their claims' peak
they would otherwise sit past the alert and the degradation threshold.

Engines that size their pool from the free memory they see at start (vLLM's profiling,
SGLang's and TGI's warm-up, Ollama's layer offload) mis-size each other when they start at the
same moment: each counts the other's loading as its own use (vLLM issue #55827, open on
v0.24-v0.28; the maintainers' view in PR #18974: instances on one GPU should not initialise at
the same time). Unless all but one of the card's engines start only after the others are up
(``staggered_start``), or an engine's version is known to handle it, the gate fails and links
the runbook. No version is known to handle it today; a pool set in bytes (vLLM
``--kv-cache-memory-bytes``) does not depend on the free memory seen, so it does not count.

Reasons are codes with parameters (``MESSAGES``, inventory.analytics.reasons), read in the reader's
language.
"""

import re
from dataclasses import dataclass

from console.proposals.gates import Gate, GateOutcome, GateStatus
from inventory.analytics.memory_pressure import on_demand_share_limit, preallocates
from inventory.analytics.reasons import Reason, gettext_noop, register

RUNBOOK = "engine-memory-settings"

# vLLM's --gpu-memory-utilization when it is not given, from the first release that has it:
# CacheConfig.gpu_memory_utilization in vllm/config/cache.py (EngineArgs in
# vllm/engine/arg_utils.py takes that default), read in the PyPI wheels; the lines are in
# tests/fixtures/engines/vllm-cache-config. 0.9 up to 0.19; 0.92 from 0.20.0 through 0.33; from
# 0.34.0 an unset value means 1.0 with the extensible KV cache, which is on by default on CUDA
# (``resolved_gpu_memory_utilization``; 0.92 only where it is off).
VLLM_DEFAULT_UTILIZATION_SINCE: tuple[tuple[tuple[int, ...], float], ...] = (
    ((0, 34, 0), 1.0),
    ((0, 20, 0), 0.92),
    ((0,), 0.9),
)
TGI_DEFAULT_FRACTION = 1.0
# Engine versions known to size their pool correctly when a neighbour loads at the same time.
SIMULTANEOUS_START_SAFE: dict[str, tuple[int, ...]] = {}


@dataclass(frozen=True)
class EngineClaim:
    name: str
    engine: str  # vllm, sglang, tgi, ollama, other
    fraction: float | None  # share of the card's memory; None: not known
    source: str  # a code: which setting (or default) the fraction comes from
    staggered: bool = False  # starts only once the card's other engines are up
    version: str = ""
    proposed: bool = False

    @property
    def sizes_from_free_memory(self) -> bool:
        """Whether its pool depends on the free memory it sees at start."""
        if self.source == "kv_cache_memory_bytes":
            return False
        return not _version_handles_simultaneous_start(self.engine, self.version)


@dataclass(frozen=True)
class CardEngines:
    card: str
    total_bytes: int
    claims: tuple[EngineClaim, ...]  # every engine on the card after the change


@dataclass(frozen=True)
class EngineSettingsRequest:
    model: str
    headroom_bytes: int
    cards: tuple[CardEngines, ...]
    memory_limit: float = 0.95  # the on-demand part's limit (DEGRADATION_LIMIT)


def _release(version: str) -> tuple[int, ...] | None:
    """(0, 28, 0) for "0.28.0" or "v0.28.0rc1"; None when no number leads it."""
    release = []
    for part in version.strip().lstrip("v").split(".")[:3]:
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        release.append(int(digits.group()))
    return tuple(release) or None


def _version_handles_simultaneous_start(engine: str, version: str) -> bool:
    first = SIMULTANEOUS_START_SAFE.get(engine)
    parsed = _release(version)
    if first is None or parsed is None:
        return False
    return parsed >= first


def vllm_default_utilization(version: str) -> tuple[float, str]:
    """The share of the card a vLLM instance of this version takes when its
    --gpu-memory-utilization is not set, and the source code of that figure. An unstated or
    unreadable version takes the newest release's default: a lower guess would let two
    engines pass that the current vLLM would not fit."""
    parsed = _release(version)
    if parsed is None:
        return VLLM_DEFAULT_UTILIZATION_SINCE[0][1], "vllm_default_version_unstated"
    # the last entry, (0,), is below every release: the search always ends
    return next(f for first, f in VLLM_DEFAULT_UTILIZATION_SINCE if parsed >= first), "vllm_default"


def engine_claim(
    name: str,
    engine: str,
    *,
    total_bytes: int,
    memory_fraction: float | None = None,
    kv_cache_bytes: int | None = None,
    weights_bytes: int = 0,
    overhead_bytes: int = 0,
    context_kv_bytes: int | None = None,
    reported_fraction: float | None = None,
    staggered: bool = False,
    version: str = "",
    proposed: bool = False,
) -> EngineClaim:
    """What one engine takes of a card by its settings; ``weights_bytes`` and
    ``overhead_bytes`` are its share on this card (weights split over TP, context and
    workspace), used where the engine is sized in bytes rather than by a fraction."""

    def claim(fraction: float | None, source: str) -> EngineClaim:
        return EngineClaim(name, engine, fraction, source, staggered, version, proposed)

    if engine == "vllm":
        if kv_cache_bytes:
            used = weights_bytes + kv_cache_bytes + overhead_bytes
            return claim(used / total_bytes, "kv_cache_memory_bytes")
        if memory_fraction is not None:
            return claim(memory_fraction, "gpu_memory_utilization")
        if reported_fraction is not None:
            return claim(reported_fraction, "reported_gpu_memory_utilization")
        return claim(*vllm_default_utilization(version))
    if engine == "sglang":
        if memory_fraction is not None:
            return claim(memory_fraction, "mem_fraction_static")
        return claim(None, "not_stated")
    if engine == "tgi":
        if memory_fraction is not None:
            return claim(memory_fraction, "cuda_memory_fraction")
        return claim(TGI_DEFAULT_FRACTION, "tgi_default")
    if engine == "ollama":
        if context_kv_bytes is None:
            return claim(None, "not_stated")
        used = weights_bytes + context_kv_bytes + overhead_bytes
        return claim(used / total_bytes, "ollama_weights_context_overhead")
    if memory_fraction is not None:
        return claim(memory_fraction, "memory_fraction")
    return claim(None, "not_stated")


MESSAGES = register(
    {
        "gate.engine_settings.fractions_exceed": gettext_noop(
            "{card}: the engines' memory settings add up to {total:.0%} of the card "
            "({claims:comma}), above the {limit:.0%} that leaves the headroom."
        ),
        "gate.engine_settings.claim": gettext_noop("{name} {fraction:.0%} ({source})"),
        "gate.engine_settings.on_demand_over": gettext_noop(
            "{card}: the on-demand engines ({names:comma}) claim {on_demand:.1%} of the card; "
            "the preallocating engines leave {left:.0%}, and at their peak the on-demand part "
            "would pass the {limit:.0%} memory limit (above {allowed:.1%} of the card)."
        ),
        "gate.engine_settings.fraction_unknown": gettext_noop(
            "{card}: {name} ({engine}) states no memory fraction ({setting}); its share of the "
            "card is unknown."
        ),
        "gate.engine_settings.simultaneous_start": gettext_noop(
            "{card}: {names:comma} size their memory from what is free when they start; "
            "started at the same moment each counts the other's loading as its own. Start "
            "them one after the other (mark all but the first as starting after the others)."
        ),
        "gate.engine_settings.fits": gettext_noop(
            "The engines' memory settings leave the headroom on every card; the fullest, "
            "{card}, adds up to {total:.0%} of {limit:.0%}."
        ),
        "gate.engine_settings.no_card": gettext_noop("No target card yet: nothing to add up."),
        # The setting that states an engine's share of the card.
        "gate.engine_settings.setting.vllm": gettext_noop(
            "--gpu-memory-utilization or --kv-cache-memory-bytes"
        ),
        "gate.engine_settings.setting.sglang": gettext_noop("--mem-fraction-static"),
        "gate.engine_settings.setting.tgi": gettext_noop("--cuda-memory-fraction"),
        "gate.engine_settings.setting.ollama": gettext_noop(
            "OLLAMA_GPU_OVERHEAD and the context size"
        ),
        "gate.engine_settings.setting.other": gettext_noop("a memory fraction"),
    }
)


def _setting(engine: str) -> Reason:
    code = f"gate.engine_settings.setting.{engine}"
    return Reason(code if code in MESSAGES else "gate.engine_settings.setting.other")


def _on_demand_reason(card: CardEngines, known: list[EngineClaim], limit: float) -> Reason | None:
    preallocated = sum(c.fraction or 0 for c in known if preallocates(c.engine))
    on_demand = [c for c in known if not preallocates(c.engine)]
    claimed = sum(c.fraction or 0 for c in on_demand)
    allowed = on_demand_share_limit(preallocated, limit)
    if not on_demand or claimed <= allowed:
        return None
    return Reason(
        "gate.engine_settings.on_demand_over",
        {
            "card": card.card,
            "names": [c.name for c in on_demand],
            "on_demand": claimed,
            "left": max(0.0, 1 - preallocated),
            "limit": limit,
            "allowed": allowed,
        },
    )


def _card_reasons(card: CardEngines, limit: float, memory_limit: float) -> list[Reason]:
    reasons: list[Reason] = []
    known = [c for c in card.claims if c.fraction is not None]
    total = sum(c.fraction for c in known if c.fraction is not None)
    if total > limit:
        claims = [
            Reason(
                "gate.engine_settings.claim",
                {"name": c.name, "fraction": c.fraction, "source": c.source},
            )
            for c in known
        ]
        reasons.append(
            Reason(
                "gate.engine_settings.fractions_exceed",
                {"card": card.card, "total": total, "limit": limit, "claims": claims},
            )
        )
    on_demand = _on_demand_reason(card, known, memory_limit)
    if on_demand is not None:
        reasons.append(on_demand)
    for claim in card.claims:
        if claim.fraction is None:
            reasons.append(
                Reason(
                    "gate.engine_settings.fraction_unknown",
                    {
                        "card": card.card,
                        "name": claim.name,
                        "engine": claim.engine,
                        "setting": _setting(claim.engine),
                    },
                )
            )
    starting = [c for c in card.claims if not c.staggered]
    if len(starting) > 1 and any(c.sizes_from_free_memory for c in starting):
        reasons.append(
            Reason(
                "gate.engine_settings.simultaneous_start",
                {"card": card.card, "names": [c.name for c in starting]},
            )
        )
    return reasons


def evaluate_engine_settings(request: EngineSettingsRequest) -> GateOutcome:
    rows, reasons = [], []
    for card in request.cards:
        limit = 1 - request.headroom_bytes / card.total_bytes
        card_reasons = _card_reasons(card, limit, request.memory_limit)
        reasons += card_reasons
        rows.append(
            {
                "card": card.card,
                "total_bytes": card.total_bytes,
                "limit_fraction": limit,
                "sum_fraction": sum(c.fraction or 0 for c in card.claims),
                "claims": [
                    {
                        "name": c.name,
                        "engine": c.engine,
                        "fraction": c.fraction,
                        "source": c.source,
                        "staggered": c.staggered,
                        "version": c.version,
                        "proposed": c.proposed,
                    }
                    for c in card.claims
                ],
            }
        )
    numbers = {"model": request.model, "cards": rows}
    if reasons:
        return GateOutcome(Gate.ENGINE_SETTINGS, GateStatus.FAIL, reasons[0], tuple(reasons),
                           numbers, runbook_slug=RUNBOOK)  # fmt: skip
    if not rows:
        summary = Reason("gate.engine_settings.no_card")
    else:
        tightest = max(rows, key=lambda row: row["sum_fraction"] - row["limit_fraction"])
        summary = Reason(
            "gate.engine_settings.fits",
            {
                "card": tightest["card"],
                "total": tightest["sum_fraction"],
                "limit": tightest["limit_fraction"],
            },
        )
    return GateOutcome(Gate.ENGINE_SETTINGS, GateStatus.PASS, summary, (), numbers,
                       runbook_slug=RUNBOOK)  # fmt: skip
