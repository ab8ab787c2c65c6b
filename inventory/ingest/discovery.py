"""Cards the inventory learns of from telemetry: the first batch naming a card creates it,
and a batch reporting another MIG layout than the inventory's rewrites the card's slices."""

import datetime as dt

from console.core.auditing import Action
from console.core.auditing.changes import audited, open_change, record_created
from inventory.ingest.mig import MODES, Layout
from inventory.models import Gpu, Host, MigSlice


def do_discover_card(host: Host, card: dict) -> Gpu:
    """A card the inventory did not know, recorded as the system's change.

    It runs inside the transaction that writes the batch naming the card (a change that joins
    it, not a durable one of its own): a batch rolled back leaves no card and no audit row.
    """
    with open_change(None, durable=False):
        gpu = Gpu.objects.create(
            host=host,
            index=card["index"],
            uuid=card["uuid"],
            product_name=card.get("name") or "unknown",
            memory_total_bytes=card.get("total_bytes") or 0,
            # MIG enabled: its devices are written by do_rediscover_mig_layout, same batch
            mig_mode=MODES.get(card.get("mig_current"), Gpu.MigMode.UNSUPPORTED),
        )
        record_created(gpu, Action.GPU_DISCOVER, None, host=host, comment="first seen in telemetry")
    return gpu


def do_rediscover_mig_layout(gpu: Gpu, layout: Layout, at: dt.datetime) -> bool:
    """A card's MIG mode and devices as a batch of `at` reports them, the system's change.

    Devices gone are closed, not deleted: the deployments and samples that named them keep
    their meaning. A batch older than the one that last told the card's layout (delivered
    late) changes nothing. Returns whether the layout was written.
    """
    with open_change(None, durable=False):
        gpu = Gpu.objects.select_for_update().get(pk=gpu.pk)
        if gpu.mig_layout_at is not None and gpu.mig_layout_at >= at:
            return False
        with audited(
            gpu,
            Action.MIG_LAYOUT,
            None,
            host=gpu.host,
            comment="MIG layout reported by telemetry",
            state=_mig_picture,
        ):
            MigSlice.objects.filter(pk__in=layout.close).update(closed_at=at)
            for pk, uuid in layout.named:
                MigSlice.objects.filter(pk=pk).update(uuid=uuid)
            MigSlice.objects.bulk_create(
                [
                    MigSlice(
                        gpu=gpu,
                        profile_name=piece.device.profile,
                        start_slot=piece.start_slot,
                        size_slots=piece.size_slots,
                        memory_bytes=piece.device.memory_bytes or 0,
                        uuid=piece.device.uuid,
                        gpu_instance_id=piece.device.gpu_instance_id,
                        compute_instance_id=piece.device.compute_instance_id,
                        start_inferred=piece.start_inferred,
                    )
                    for piece in layout.open
                ]
            )
            gpu.mig_mode, gpu.mig_mode_pending = layout.mode, layout.pending
            gpu.mig_layout_at = at
            gpu.save(update_fields=["mig_mode", "mig_mode_pending", "mig_layout_at"])
    return True


def _mig_picture(gpu: Gpu) -> dict:
    return {
        "mig_mode": gpu.mig_mode,
        "mig_mode_pending": gpu.mig_mode_pending,
        "slices": [
            f"{piece.profile_name}@{piece.start_slot}+{piece.size_slots} "
            f"gi{piece.gpu_instance_id} ci{piece.compute_instance_id} {piece.uuid}"
            + (" (start inferred)" if piece.start_inferred else "")
            for piece in MigSlice.objects.filter(gpu=gpu).order_by(
                "start_slot", "compute_instance_id"
            )
        ],
    }
