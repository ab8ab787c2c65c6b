"""A batch's process rows as columns, the form ingest checks and writes them in.

A full inference host sends some thirty process rows a batch, and ingest handles a hundred
thousand rows a second or more: done row by row, with a dozen dictionary lookups and a
function call each, the Python work cost three times the COPY that writes them. As columns,
the checks across rows (inventory.telemetry.batch_schema) and the building of the COPY rows
(inventory.timeseries.ingest) are a few passes of C (set, zip, map) over each column.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

ALLOCATOR_FIGURES = (
    "reserved_bytes",
    "allocated_bytes",
    "inactive_split_bytes",
    "largest_free_block_bytes",
)


@dataclass(frozen=True)
class ProcessColumns:
    """One list per field, a row's values at the same position in each.

    ``card`` is how the row names its card, as the checks key it: the UUID, else the index.
    The allocator's figures are None in a row without allocator statistics.
    """

    card: list
    card_uuid: list
    card_index: list
    pid: list
    kind: list
    name: list
    deployment_id: list
    mig_device_uuid: list
    used_bytes_max: list
    used_bytes_last: list
    samples: list
    reserved_bytes: list
    allocated_bytes: list
    inactive_split_bytes: list
    largest_free_block_bytes: list

    @classmethod
    def of(cls, rows: list[dict]) -> ProcessColumns:
        uuids = [row.get("card_uuid") for row in rows]
        indexes = [row.get("card_index") for row in rows]
        allocators = [row.get("allocator") or _NO_ALLOCATOR for row in rows]
        return cls(
            [uuid_ or index for uuid_, index in zip(uuids, indexes, strict=True)],
            uuids,
            indexes,
            [row.get("pid") for row in rows],
            [row.get("kind") for row in rows],
            [row.get("name") for row in rows],
            [row.get("deployment_id") for row in rows],
            [row.get("mig_device_uuid") for row in rows],
            [row.get("used_bytes_max") for row in rows],
            [row.get("used_bytes_last") for row in rows],
            [row.get("samples") for row in rows],
            *([allocator.get(key) for allocator in allocators] for key in ALLOCATOR_FIGURES),
        )

    def __len__(self) -> int:
        return len(self.pid)

    def take(self, positions: list[int]) -> ProcessColumns:
        """The rows at these positions, in this order."""
        return ProcessColumns(*([column[p] for p in positions] for column in self._columns()))

    def one_per_process(self) -> ProcessColumns:
        """One row per card and PID.

        NVML lists an MPS client in both its compute and its MPS list, with the same memory;
        agents before the collector merged the two sent both rows. Counted twice, the client's
        memory would double on the card: keep the MPS row.
        """
        keys = list(zip(self.card, self.pid, strict=True))
        if len(set(keys)) == len(keys):
            return self
        chosen: dict[tuple, int] = {}
        for position, key in enumerate(keys):
            if key not in chosen or self.kind[position] == "mps":
                chosen[key] = position
        return self.take(list(chosen.values()))

    def _columns(self) -> list[list]:
        return [getattr(self, field.name) for field in fields(self)]


_NO_ALLOCATOR: dict = {}
