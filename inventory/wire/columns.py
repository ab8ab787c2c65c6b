"""A batch's process rows as columns: the form they travel in and ingest checks and writes.

A full inference host sends some thirty process rows a batch, and ingest handles a hundred
thousand rows a second or more: done row by row, with a dozen dictionary lookups and a
function call each, the Python work cost three times the COPY that writes them. As columns,
the checks across rows (inventory.wire.schema) and the building of the COPY rows
(inventory.ingest.writer) are a few passes of C (set, zip, map) over each column.

On the wire ("gpu-telemetry-batch/2", what agents publish) the batch's ``processes`` is an
object of columns, one list per field of a row, the allocator's figures an object of columns
of their own: ``{"pid": [468, 470], "card_index": [0, 0], ..., "allocator": {"reserved_bytes":
[1024, null], ...}}``. It decodes to lists of numbers and strings, not to a dict a row, which
halves both its size and its decoding. The agent builds its batches as rows ("/1", still
accepted) and turns them into columns only as it publishes (batch_schema.on_the_wire).
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
    def of_wire(cls, columns: dict) -> ProcessColumns:
        """From a "/2" batch's processes, whose columns the check has found of one length."""
        count = len(columns["pid"])
        absent = [None] * count

        def column(key: str, within: dict = columns) -> list:
            return within.get(key) or absent

        uuids, indexes = column("card_uuid"), column("card_index")
        allocator = columns.get("allocator") or {}
        return cls(
            _cards(uuids, indexes),
            uuids,
            indexes,
            columns["pid"],
            column("kind"),
            column("name"),
            column("deployment_id"),
            column("mig_device_uuid"),
            column("used_bytes_max"),
            column("used_bytes_last"),
            column("samples"),
            *(column(key, allocator) for key in ALLOCATOR_FIGURES),
        )

    @classmethod
    def of(cls, rows: list[dict]) -> ProcessColumns:
        uuids = [row.get("card_uuid") for row in rows]
        indexes = [row.get("card_index") for row in rows]
        allocators = [row.get("allocator") or _NO_ALLOCATOR for row in rows]
        return cls(
            _cards(uuids, indexes),
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


def columns_of(rows: list[dict]) -> dict:
    """Rows as "/2" carries them: every field of every row, null where a row lacks it; the
    allocator's figures likewise, null in a row without them."""
    keys = dict.fromkeys(["pid", *(key for row in rows for key in row if key != "allocator")])
    columns: dict = {key: [row.get(key) for row in rows] for key in keys}
    allocators = [row.get("allocator") or _NO_ALLOCATOR for row in rows]
    allocator_keys = list(dict.fromkeys(key for allocator in allocators for key in allocator))
    if allocator_keys:
        columns["allocator"] = {
            key: [allocator.get(key) for allocator in allocators] for key in allocator_keys
        }
    return columns


def rows_of_wire(columns: dict) -> list[dict]:
    """A "/2" batch's process rows as "/1" sends them (for what reads a few rows whole: an
    event's snapshot, a check's search for the row at fault). A row's allocator is None where
    it has no figure."""
    if not columns:
        return []
    count = len(columns["pid"])
    # Only whole columns: a field the check does not know is left alone, whatever its shape.
    allocator = _whole_columns(columns.get("allocator") or {}, count)
    row_columns = _whole_columns(columns, count)
    rows = []
    for position in range(count):
        row = {key: values[position] for key, values in row_columns.items()}
        figures = {
            key: values[position] for key, values in allocator.items()
            if values[position] is not None
        }  # fmt: skip
        row["allocator"] = figures or None
        rows.append(row)
    return rows


def _whole_columns(columns: dict, count: int) -> dict:
    return {
        key: values for key, values in columns.items()
        if key != "allocator" and isinstance(values, list) and len(values) == count
    }  # fmt: skip


def _cards(uuids: list, indexes: list) -> list:
    """How each row names its card, as the checks key it: the UUID, else the index."""
    if None in uuids or "" in uuids:
        return [uuid_ or index for uuid_, index in zip(uuids, indexes, strict=True)]
    return uuids  # every row names its card by UUID, as agents send them
