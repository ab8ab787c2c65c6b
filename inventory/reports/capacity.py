"""What a card's tenants demand, measured: the figures the memory gate and the host page need.

Demand is what the caching allocators had *allocated* (NVML's per-process figure where no
allocator statistics exist) plus what each process holds outside its allocator, as NVML counts
it: CUDA context and library workspaces (NVML used - allocator reserved; the card type's
estimate for a process NVML does not report, see ``inventory.analytics.context``). What the
allocators held reserved on top of the allocation is counted separately as the allocator-held
peak. Their sum is what NVML showed as used, so nothing is counted twice.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone

from inventory.analytics.context import cuda_context_estimate
from inventory.analytics.fragmentation import (
    SCALE_INACTIVE_SPLIT,
    SCALE_LARGEST_BLOCK,
    sustained_fragmentation,
)
from inventory.analytics.stats import percentile
from inventory.models import Gpu
from inventory.reports.thresholds import fragmentation_thresholds
from inventory.timeseries import queries

WINDOW = dt.timedelta(days=7)


@dataclass(frozen=True)
class CardCapacity:
    gpu_id: int
    card: str
    total_bytes: int
    driver_reserved_bytes: int
    samples: int  # sample times in the window
    demand_p95: dict[int, int]  # deployment id -> P95 of its allocated bytes on this card
    demand_peak: dict[int, int]
    # deployment id -> P95 of its bytes outside the allocator (context, workspaces), included
    # in its demand; measured unless the deployment is in ``context_estimated``.
    context_p95: dict[int, int]
    context_estimated: frozenset[int]
    joint_peak_bytes: int  # the highest sum of all tenants' allocated bytes at one moment
    allocator_held_peak_bytes: int  # reserved but unallocated, summed over processes, at peak
    fragmentation_index_peak: float | None
    fragmentation_status: str  # green / amber / red, of the sustained index
    # The index the card held for FRAGMENTATION_SUSTAINED_SHARE of the window (moments with
    # at least FRAGMENTATION_MIN_FREE_BYTES held free), and the scale it is on.
    fragmentation_index_sustained: float | None = None
    fragmentation_scale: str = SCALE_LARGEST_BLOCK
    # sample time -> deployment id -> its demand then: for the joint peak of any set of tenants
    demand_by_moment: dict[dt.datetime, dict[int, int]] = field(default_factory=dict)

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes - self.driver_reserved_bytes

    def joint_peak_of(self, deployments: set[int]) -> int | None:
        """The highest sum of these deployments' demand at one moment (they peak together or
        they do not: the co-peak, not the sum of their P95s); None without history."""
        sums = [
            sum(demand for d, demand in moment.items() if d in deployments)
            for moment in self.demand_by_moment.values()
            if deployments & moment.keys()
        ]
        return max(sums, default=None)


def card_capacity(gpu: Gpu, *, window: dt.timedelta = WINDOW, now=None) -> CardCapacity:
    now = now or timezone.now()
    reserved = queries.driver_reserved_at(gpu.pk, now)
    context_each = cuda_context_estimate(gpu.product_name).bytes
    per_deployment: dict[int, list[int]] = {}
    outside: dict[int, list[int]] = {}
    estimated: set[int] = set()
    joint: dict[dt.datetime, int] = {}
    held: dict[dt.datetime, int] = {}
    frag: dict[dt.datetime, float] = {}
    by_moment: dict[dt.datetime, dict[int, int]] = {}
    fallback = False
    for row in queries.deployment_demand(gpu.pk, now - window, now):
        ts, allocated = row["ts"], row["allocated"]
        beside = int(row["outside"] or 0) + int(row["blind"] or 0) * context_each
        deployment = row["deployment_id"]
        if deployment is not None and allocated is not None:
            per_deployment.setdefault(deployment, []).append(int(allocated) + beside)
            outside.setdefault(deployment, []).append(beside)
            by_moment.setdefault(ts, {})[deployment] = int(allocated) + beside
            if row["blind"]:
                estimated.add(deployment)
        joint[ts] = joint.get(ts, 0) + int(allocated or 0) + beside
        held[ts] = held.get(ts, 0) + int(row["held"] or 0)
        if row["frag"] is not None:
            frag[ts] = max(frag.get(ts, 0.0), row["frag"])
        fallback = fallback or bool(row["frag_fallback"])
    sustained = sustained_fragmentation(
        ((index, held.get(ts, 0)) for ts, index in frag.items()),
        share=settings.FRAGMENTATION_SUSTAINED_SHARE,
        min_free_bytes=settings.FRAGMENTATION_MIN_FREE_BYTES,
    )
    frag_peak = max(frag.values(), default=None)
    return CardCapacity(
        gpu_id=gpu.pk,
        card=str(gpu),
        total_bytes=gpu.memory_total_bytes,
        driver_reserved_bytes=int(reserved or 0),
        samples=len(joint),
        demand_p95={d: int(percentile(v, 95)) for d, v in per_deployment.items()},
        demand_peak={d: max(v) for d, v in per_deployment.items()},
        context_p95={d: int(percentile(v, 95)) for d, v in outside.items()},
        context_estimated=frozenset(estimated),
        joint_peak_bytes=max(joint.values(), default=0),
        allocator_held_peak_bytes=max(held.values(), default=0),
        fragmentation_index_peak=frag_peak,
        fragmentation_status=(
            "green"
            if sustained.index is None
            else fragmentation_thresholds().classify(sustained.index).value
        ),
        fragmentation_index_sustained=sustained.index,
        fragmentation_scale=SCALE_INACTIVE_SPLIT if fallback else SCALE_LARGEST_BLOCK,
        demand_by_moment=by_moment,
    )
