"""A host's cards, MIG devices and deployments by the keys its batches name them with."""

from dataclasses import dataclass
from functools import cached_property

from django.db import connection

from inventory.ingest.discovery import do_discover_card
from inventory.models import Deployment, Gpu, Host, MigSlice


@dataclass
class HostMaps:
    """Card, MIG device and deployment ids of one host, by the keys a batch carries."""

    gpu_by_index: dict[int, int]
    gpu_by_uuid: dict[str, int]
    mig_by_uuid: dict[str, int]
    deployments: set[int]

    @classmethod
    def load_for(cls, hosts: set[Host]) -> dict[int, "HostMaps"]:
        """The maps of every host of a group, in one statement whatever the group's size."""
        maps = {host.pk: cls({}, {}, {}, set()) for host in hosts}
        gpu, mig, deployment = (model._meta.db_table for model in (Gpu, MigSlice, Deployment))
        with connection.cursor() as cursor:
            cursor.execute(
                f"""
                SELECT 'gpu', id, host_id, index, uuid FROM {gpu} WHERE host_id = ANY(%(hosts)s)
                UNION ALL
                SELECT 'mig', m.id, g.host_id, NULL, m.uuid FROM {mig} m JOIN {gpu} g
                    ON g.id = m.gpu_id WHERE g.host_id = ANY(%(hosts)s) AND m.uuid <> ''
                UNION ALL
                SELECT 'deployment', id, host_id, NULL, NULL FROM {deployment}
                    WHERE host_id = ANY(%(hosts)s)
                """,
                {"hosts": sorted(maps)},
            )
            for kind, pk, host_id, index, uuid_ in cursor.fetchall():
                if kind == "gpu":
                    maps[host_id].gpu_by_index[index] = pk
                    maps[host_id].gpu_by_uuid[uuid_] = pk
                elif kind == "mig":
                    maps[host_id].mig_by_uuid[uuid_] = pk
                else:
                    maps[host_id].deployments.add(pk)
        return maps

    def discover(self, host: Host, payload: dict) -> list[Gpu]:
        """Create the batch's cards the host does not have yet; return them."""
        created = []
        for card in payload.get("cards", []):
            if card.get("uuid") and card["uuid"] not in self.gpu_by_uuid:
                gpu = do_discover_card(host, card)
                self.gpu_by_uuid[gpu.uuid] = gpu.pk
                self.gpu_by_index[gpu.index] = gpu.pk
                created.append(gpu)
        return created

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
