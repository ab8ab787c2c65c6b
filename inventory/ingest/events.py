"""A batch's events (with the card's memory at each, OOMs triaged) and collector faults."""

from inventory.analytics.oom_triage import triage_snapshot
from inventory.ingest.maps import HostMaps
from inventory.ingest.values import timestamp
from inventory.models import CollectorFault, Event, Host


def one_row_per_process(processes: list[dict]) -> list[dict]:
    """The batch's process rows, one per card and PID, the MPS row kept where there are two
    (as ProcessColumns.one_per_process, for the rows an event's snapshot shows)."""
    rows: dict[tuple, dict] = {}
    for row in processes:
        key = (row.get("card_uuid") or row.get("card_index"), row["pid"])
        if key not in rows or row.get("kind") == "mps":
            rows[key] = row
    return list(rows.values())


def _process_snapshot(payload: dict, card_index, card_uuid) -> list[dict]:
    return [
        {
            "pid": row["pid"],
            "name": row.get("name"),
            "deployment_id": row.get("deployment_id"),
            "used_bytes": row.get("used_bytes_max"),
            "allocator": row.get("allocator"),
        }
        for row in one_row_per_process(payload.get("processes", []))
        if row.get("card_uuid") == card_uuid or row.get("card_index") == card_index
    ]


_SNAPSHOT_FIGURES = ("requested_bytes", "free_bytes", "capacity_bytes", "mig_device_uuid")


def _event_snapshot(payload: dict, row: dict, detail: dict) -> dict:
    """The card's memory at the event: from the agent when it took one, else from the batch."""
    processes = detail.pop("processes", None)
    if processes is None:
        processes = _process_snapshot(payload, row.get("card_index"), row.get("card_uuid"))
    snapshot_ = {key: detail[key] for key in _SNAPSHOT_FIGURES if key in detail}
    card = next(
        (
            c
            for c in payload.get("cards", [])
            if c.get("uuid") == row.get("card_uuid") or c.get("index") == row.get("card_index")
        ),
        {},
    )
    snapshot_["card_total_bytes"] = card.get("total_bytes")
    snapshot_["card_reserved_bytes"] = card.get("reserved_bytes_last")
    snapshot_.setdefault("free_bytes", card.get("free_bytes_min"))
    snapshot_["processes"] = [_snapshot_process(process) for process in processes]
    return snapshot_


_ALLOCATOR_FIGURES = (
    "reserved_bytes",
    "allocated_bytes",
    "inactive_split_bytes",
    "largest_free_block_bytes",
)


def _snapshot_process(process: dict) -> dict:
    """One shape for a process in a snapshot, whether its allocator figures came nested or flat."""
    allocator = process.get("allocator") or {
        key: process[key] for key in _ALLOCATOR_FIGURES if key in process
    }
    return {
        "pid": process.get("pid"),
        "name": process.get("name"),
        "deployment_id": process.get("deployment_id"),
        "used_bytes": process.get("used_bytes"),
        "allocator": allocator or None,
    }


def events_of(payload: dict, host: Host, maps: HostMaps) -> list[Event]:
    events = []
    for position, row in enumerate(payload.get("events", [])):
        detail = dict(row.get("detail") or {})
        kind = row.get("kind")
        if kind == "xid" and detail.get("xid") == 79:
            kind = Event.Kind.GPU_LOST
        if kind not in Event.Kind.values:
            kind = Event.Kind.XID if "xid" in detail else None
        if kind is None:
            continue
        snapshot_ = _event_snapshot(payload, row, detail)
        cause = explanation = ""
        reason = {}
        if kind == Event.Kind.OOM:
            triage = triage_snapshot(snapshot_, detail.get("pid"))
            cause, explanation = triage.cause.value, triage.explanation
            reason = triage.reason.to_json()
        events.append(
            Event(
                host=host,
                gpu_id=maps.gpu_id(row),
                deployment_id=maps.deployment_id(detail.get("deployment_id")),
                kind=kind,
                at=timestamp(row["ts"]),
                xid=detail.get("xid"),
                detail=detail,
                snapshot=snapshot_,
                cause=cause,
                cause_explanation=explanation,
                cause_reason=reason,
                batch_id=payload["batch_id"],
                position=position,
            )
        )
    return events


def faults_of(payload: dict, host: Host, maps: HostMaps) -> list[CollectorFault]:
    return [
        CollectorFault(
            host=host,
            gpu_id=maps.gpu_id(row) if row.get("card_index") is not None else None,
            card_index=row.get("card_index"),
            call=str(row.get("call", ""))[:100],
            error=str(row.get("error", ""))[:100],
            message=str(row.get("message", "")),
            count=row.get("count") or 1,
            first_at=timestamp(row.get("first_ts") or payload["interval_start"]),
            last_at=timestamp(row.get("last_ts") or payload["interval_end"]),
            batch_id=payload["batch_id"],
        )
        for row in payload.get("faults", [])
    ]
