"""What each card of a host holds after a change: its tenants' measured or estimated demand,
its driver reserve and fragmentation, as the memory gate and the load test read them."""

import datetime as dt
from collections.abc import Collection

from console.proposals.gates.memory import CardBudget, Tenant
from inventory.analytics.context import cuda_context_estimate
from inventory.analytics.reasons import Reason
from inventory.models import Deployment, Gpu
from inventory.placement_state import estimated_bytes_per_card
from inventory.reports.capacity import WINDOW as CAPACITY_WINDOW
from inventory.reports.capacity import card_capacity


def tenants_by_card(host, leaving: Collection[int]) -> dict[int, list[Deployment]]:
    on_card: dict[int, list[Deployment]] = {}
    active = (
        host.deployments.exclude(status=Deployment.Status.STOPPED)
        .exclude(pk__in=leaving)
        .filter(mig_slice__isnull=True)
        .select_related("served_model")
        .prefetch_related("gpus")
    )
    for deployment in active:
        for gpu in deployment.gpus.all():
            on_card.setdefault(gpu.pk, []).append(deployment)
    return on_card


def card_budgets(
    host, leaving: Collection[int], now: dt.datetime | None = None
) -> dict[Gpu, CardBudget]:
    """Every card of the host that takes non-MIG work, with what is on it after the change
    (its telemetry as of `now`)."""
    on_card = tenants_by_card(host, leaving)
    budgets = {}
    for gpu in host.gpus.exclude(mig_mode=Gpu.MigMode.ENABLED).order_by("index"):
        capacity = card_capacity(gpu, now=now)
        # A card no tenant stays on starts clean: the allocators whose fragmentation was
        # measured there have stopped, or stop with the change.
        cleared = not on_card.get(gpu.pk)
        tenants = []
        context = cuda_context_estimate(gpu.product_name)
        for deployment in on_card.get(gpu.pk, []):
            measured = capacity.demand_p95.get(deployment.pk)
            tenants.append(
                Tenant(
                    deployment.served_model.name,
                    measured,
                    Reason("gate.memory.basis.measured", {"count": CAPACITY_WINDOW.days}),
                    capacity.context_p95.get(deployment.pk, 0),
                    context.source
                    if deployment.pk in capacity.context_estimated
                    else "nvml_used_minus_allocator",
                    measured=True,
                )
                if measured is not None
                else Tenant(
                    deployment.served_model.name,
                    estimated_bytes_per_card(
                        deployment, len(deployment.gpus.all()), gpu.product_name
                    ),
                    Reason("gate.memory.basis.estimate"),
                    context.bytes,
                    context.source,
                )
            )
        budgets[gpu] = CardBudget(
            card=str(gpu),
            total_bytes=gpu.memory_total_bytes,
            driver_reserved_bytes=capacity.driver_reserved_bytes,
            tenants=tuple(tenants),
            fragmentation_peak_bytes=0 if cleared else capacity.allocator_held_peak_bytes,
            fragmentation_index_peak=None if cleared else capacity.fragmentation_index_peak,
            fragmentation_status="green" if cleared else capacity.fragmentation_status,
            measured=capacity.samples > 0,
            measured_joint_peak_bytes=capacity.joint_peak_of(
                {d.pk for d in on_card.get(gpu.pk, []) if d.pk in capacity.demand_p95}
            ),
            fragmentation_index_sustained=(
                None if cleared else capacity.fragmentation_index_sustained
            ),
            fragmentation_scale=capacity.fragmentation_scale,
        )
    return budgets
