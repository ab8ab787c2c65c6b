"""A host's cards, MIG devices and deployments by the keys its batches name them with."""

import datetime as dt
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db import connection

from inventory.ingest import mig
from inventory.ingest.discovery import do_discover_card, do_rediscover_mig_layout
from inventory.models import Deployment, Gpu, Host, MigSlice


@dataclass
class HostMaps:
    """Card, MIG device and deployment ids of one host, by the keys a batch carries."""

    gpu_by_index: dict[int, int]
    gpu_by_uuid: dict[str, int]
    mig_by_uuid: dict[str, int]
    deployments: set[int]
    mig_modes: dict[int, tuple[str, str]] = field(default_factory=dict)  # card: now, pending
    open_uuids: dict[int, set[str]] = field(default_factory=dict)  # card: its MIG devices now

    @classmethod
    def load_for(cls, hosts: set[Host]) -> dict[int, "HostMaps"]:
        """The maps of every host of a group, in one statement whatever the group's size."""
        maps = {host.pk: cls({}, {}, {}, set()) for host in hosts}
        gpu, mig, deployment = (model._meta.db_table for model in (Gpu, MigSlice, Deployment))
        # The ids cast to bigint[]: psycopg sends small ints as smallint[], and a cross-type
        # = ANY cannot be hashed, so a scan of the deployments compared each row with every
        # id of the group (17 ms a group of 500 hosts at 2,000, growing with the fleet).
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT 'gpu', id, host_id, index, uuid, mig_mode, mig_mode_pending
                    FROM {gpu} WHERE host_id = ANY(%(hosts)s::bigint[])
                UNION ALL
                SELECT 'mig', m.id, g.host_id, m.gpu_id,  m.uuid,
                    CASE WHEN m.closed_at IS NULL THEN 'open' END, NULL
                    FROM {mig} m JOIN {gpu} g
                    ON g.id = m.gpu_id WHERE g.host_id = ANY(%(hosts)s::bigint[]) AND m.uuid <> ''
                UNION ALL
                SELECT 'deployment', id, host_id, NULL, NULL, NULL, NULL FROM {deployment}
                    WHERE host_id = ANY(%(hosts)s::bigint[])
                -- a device's open slice wins over closed ones of the same UUID
                ORDER BY 6 NULLS FIRST
                """,
                {"hosts": sorted(maps)},
            )
            for kind, pk, host_id, index, uuid_, mode, pending in cursor.fetchall():
                if kind == "gpu":
                    maps[host_id].gpu_by_index[index] = pk
                    maps[host_id].gpu_by_uuid[uuid_] = pk
                    maps[host_id].mig_modes[pk] = (mode, pending)
                elif kind == "mig":
                    maps[host_id].mig_by_uuid[uuid_] = pk
                    if mode == "open":  # index: the slice's card
                        maps[host_id].open_uuids.setdefault(index, set()).add(uuid_)
                else:
                    maps[host_id].deployments.add(pk)
        return maps

    def card_indexes(self) -> dict[str, int]:
        """The host's cards' indexes, by UUID (cards without one left out)."""
        index_of = {pk: index for index, pk in self.gpu_by_index.items()}
        return {uuid_: index_of[pk] for uuid_, pk in self.gpu_by_uuid.items() if uuid_}

    def discover(self, host: Host, payload: dict) -> list[Gpu]:
        """Create the batch's cards the host does not have yet; return them."""
        created = []
        for card in payload.get("cards", []):
            if card.get("uuid") and card["uuid"] not in self.gpu_by_uuid:
                gpu = do_discover_card(host, card)
                self.gpu_by_uuid[gpu.uuid] = gpu.pk
                self.gpu_by_index[gpu.index] = gpu.pk
                self.mig_modes[gpu.pk] = (gpu.mig_mode, gpu.mig_mode_pending)
                created.append(gpu)
        return created

    def may_change_mig(self, payload: Any) -> bool:
        """Whether a batch, not checked yet, may report another MIG layout than the
        inventory's: it has a MIG card, or a card whose MIG mode differs."""
        cards = payload.get("cards") if isinstance(payload, dict) else None
        for card in cards if isinstance(cards, list) else ():
            if not isinstance(card, dict) or type(card.get("mig_current")) is not int:
                continue  # the check refuses it, or says nothing of MIG
            mode = mig.MODES.get(card["mig_current"])
            uuid_, index = card.get("uuid"), card.get("index")
            gpu_id = self.gpu_by_uuid.get(uuid_) if isinstance(uuid_, str) else None
            if gpu_id is None and type(index) is int:
                gpu_id = self.gpu_by_index.get(index)
            if (
                mode is not None
                and gpu_id is not None
                and (
                    mode == mig.ENABLED
                    or gpu_id in self.open_uuids
                    or self.mig_modes.get(gpu_id, ("", ""))[0] != mode
                )
            ):
                return True
        return False

    def rediscover_mig(self, payload: dict, at: dt.datetime) -> None:
        """Write the MIG layouts the batch reports where they differ from the inventory's."""
        for gpu_id, report in mig.reported(payload, self.gpu_id).items():
            mode, pending = self.mig_modes.get(gpu_id, ("", ""))
            reported_uuids = {device.uuid for device in report.devices}
            if (report.mode, report.pending) == (mode, pending) and reported_uuids == (
                self.open_uuids.get(gpu_id) or set()
            ):
                continue  # the layout the inventory holds: every batch of a card, no query
            gpu = Gpu.objects.get(pk=gpu_id)
            known = [
                mig.Known(
                    s.pk,
                    s.uuid,
                    s.gpu_instance_id,
                    s.compute_instance_id,
                    s.profile_name,
                    s.start_slot,
                    s.size_slots,
                )
                for s in MigSlice.objects.filter(gpu_id=gpu_id)
            ]
            layout = mig.relayout(
                report, mode, pending, known, gpu.product_name, gpu.memory_total_bytes
            )
            if layout is None or not do_rediscover_mig_layout(gpu, layout, at):
                continue
            self.mig_modes[gpu_id] = (layout.mode, layout.pending)
            self.open_uuids[gpu_id] = set()
            for piece in MigSlice.objects.filter(gpu_id=gpu_id):
                self.mig_by_uuid[piece.uuid] = piece.pk
                self.open_uuids[gpu_id].add(piece.uuid)

    def gpu_id(self, row: dict) -> int | None:
        uuid_ = row.get("card_uuid") or row.get("uuid")
        if uuid_ and uuid_ in self.gpu_by_uuid:
            return self.gpu_by_uuid[uuid_]
        index = row.get("card_index", row.get("index"))
        return self.gpu_by_index.get(index)

    def deployment_ids(self, raws: list) -> list[int | None]:
        """deployment_id of each, most by one dictionary lookup: ids come as the text of a
        number (what the plan sent), and only an odd one (" 12", "012") needs parsing."""
        found = list(map(self.deployment_by_text.get, raws))
        if found.count(None) != raws.count(None):
            found = [
                pk if pk is not None else self.deployment_id(raw)
                for pk, raw in zip(found, raws, strict=True)
            ]
        return found

    @cached_property
    def deployment_by_text(self) -> dict[str, int]:
        return {str(pk): pk for pk in self.deployments}

    def deployment_id(self, raw) -> int | None:
        """The host's deployment a batch names (by its id, as text), or None."""
        if raw is None:
            return None
        try:
            value = int(raw)
        except (TypeError, ValueError):
            return None
        return value if value in self.deployments else None
