"""Cards the inventory learns of from telemetry: the first batch naming a card creates it."""

from console.core.auditing import Action
from console.core.auditing.changes import open_change, record_created
from inventory.models import Gpu, Host


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
        )
        record_created(gpu, Action.GPU_DISCOVER, None, host=host, comment="first seen in telemetry")
    return gpu
