"""A host's deployments as a placement request and answer, to draw and to plan against.

Each deployment's memory on a card is what its processes hold there now (newest samples);
where the collector has not seen it, the deployment's own figures stand in: weights split over
its cards, KV as each card holds it, the CUDA context and a workspace allowance.
"""

import datetime as dt

from inventory.analytics.context import cuda_context_estimate
from inventory.models import Deployment, Gpu, Host
from inventory.timeseries.queries import latest_process_memory

MIB = 1024**2
# Activations, CUDA graphs and cuBLAS/NCCL workspaces beside weights, KV and the CUDA
# context, when nothing was measured.
WORKSPACE_ALLOWANCE = 2 * 1024**3


def deployment_label(deployment: Deployment, duplicates: set[str]) -> str:
    name = deployment.served_model.name
    return f"{name} #{deployment.pk}" if name in duplicates else name


def estimated_bytes_per_card(deployment: Deployment, cards: int, product_name: str = "") -> int:
    """A deployment's own figures on one of its cards: its weights split over the cards, its KV
    as each card holds it (``Deployment.kv_per_card``: MLA replicated, GQA heads split), the
    CUDA context of its process there (the card type's estimate) and the workspace allowance."""
    model = deployment.served_model
    return (
        model.weights_bytes // max(1, cards)
        + deployment.kv_per_card().bytes
        + cuda_context_estimate(product_name).bytes
        + WORKSPACE_ALLOWANCE
    )


def current_placement(host: Host) -> tuple[dict, dict]:
    gpus = list(host.gpus.prefetch_related("mig_slices").order_by("index"))
    deployments = list(
        host.deployments.exclude(status=Deployment.Status.STOPPED)
        .select_related("served_model", "mig_slice")
        .prefetch_related("gpus")
    )
    names = [d.served_model.name for d in deployments]
    duplicates = {name for name in names if names.count(name) > 1}
    measured = latest_process_memory([gpu.pk for gpu in gpus], within=dt.timedelta(minutes=15))
    request = {
        "gpus": [_card(gpu) for gpu in gpus],
        "models": [],
        "policy": {"headroom_mib": 0},
        "exclusive_existing": [],
    }
    answer = {"assignments": [], "cards": []}
    used: dict[int, int] = {gpu.pk: 0 for gpu in gpus}
    on_card: dict[int, list[str]] = {gpu.pk: [] for gpu in gpus}
    slices: dict[int, dict[int, dict]] = {}
    for deployment in deployments:
        label = deployment_label(deployment, duplicates)
        if deployment.isolation_mode == Deployment.Isolation.GPU_GROUP:
            request["exclusive_existing"].append(label)
        if deployment.mig_slice_id:
            piece = deployment.mig_slice
            entry = slices.setdefault(piece.gpu_id, {}).setdefault(
                piece.start_slot, _slice_entry(piece)
            )
            entry["model"] = ", ".join(filter(None, [entry["model"], label]))
            continue
        cards = list(deployment.gpus.all())
        per_card = [
            measured.get((gpu.pk, deployment.pk))
            or estimated_bytes_per_card(deployment, len(cards), gpu.product_name)
            for gpu in cards
        ]
        request["models"].append(
            {"name": label, "memory_mib": max(per_card, default=0) // MIB, "gpus": len(cards)}
        )
        answer["assignments"].append({"model": label, "gpus": [str(gpu) for gpu in cards]})
        for gpu, held in zip(cards, per_card, strict=True):
            used[gpu.pk] += held
            on_card[gpu.pk].append(label)
    for gpu in gpus:
        total = gpu.memory_total_bytes // MIB
        answer["cards"].append(
            {
                "id": str(gpu),
                "used_mib": used[gpu.pk] // MIB,
                "free_mib": max(0, total - used[gpu.pk] // MIB),
                "models": on_card[gpu.pk],
                "mig_slices": _unused_slices(gpu) | slices.get(gpu.pk, {}),
            }
        )
    for card in answer["cards"]:
        card["mig_slices"] = sorted(card["mig_slices"].values(), key=lambda s: s["start"])
    return request, answer


def _card(gpu: Gpu) -> dict:
    return {
        "id": str(gpu),
        "host": gpu.host.name,
        "type": gpu.product_name,
        "memory_mib": gpu.memory_total_bytes // MIB,
        "mig": gpu.mig_mode == Gpu.MigMode.ENABLED,
    }


def _slice_entry(piece) -> dict:
    # Slots and memory as NVML reported them, so a card type without a MIG catalogue entry
    # can still be drawn from its own figures.
    return {
        "profile": piece.profile_name,
        "start": piece.start_slot,
        "size_slots": piece.size_slots,
        "memory_mib": piece.memory_bytes // MIB,
        "model": "",
    }


def _unused_slices(gpu: Gpu) -> dict[int, dict]:
    return {piece.start_slot: _slice_entry(piece) for piece in gpu.mig_slices.all()}
