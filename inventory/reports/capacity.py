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
from dataclasses import dataclass

from django.utils import timezone

from inventory.analytics.context import cuda_context_estimate
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
    fragmentation_status: str  # green / amber / red

    @property
    def usable_bytes(self) -> int:
        return self.total_bytes - self.driver_reserved_bytes


def card_capacity(gpu: Gpu, *, window: dt.timedelta = WINDOW, now=None) -> CardCapacity:
    now = now or timezone.now()
    reserved = queries.driver_reserved_at(gpu.pk, now)
    context_each = cuda_context_estimate(gpu.product_name).bytes
    per_deployment: dict[int, list[int]] = {}
    outside: dict[int, list[int]] = {}
    estimated: set[int] = set()
    joint: dict[dt.datetime, int] = {}
    held: dict[dt.datetime, int] = {}
    frag_peak = None
    for row in queries.deployment_demand(gpu.pk, now - window, now):
        ts, allocated = row["ts"], row["allocated"]
        beside = int(row["outside"] or 0) + int(row["blind"] or 0) * context_each
        deployment = row["deployment_id"]
        if deployment is not None and allocated is not None:
            per_deployment.setdefault(deployment, []).append(int(allocated) + beside)
            outside.setdefault(deployment, []).append(beside)
            if row["blind"]:
                estimated.add(deployment)
        joint[ts] = joint.get(ts, 0) + int(allocated or 0) + beside
        held[ts] = held.get(ts, 0) + int(row["held"] or 0)
        if row["frag"] is not None:
            frag_peak = row["frag"] if frag_peak is None else max(frag_peak, row["frag"])
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
            "green" if frag_peak is None else fragmentation_thresholds().classify(frag_peak).value
        ),
    )
