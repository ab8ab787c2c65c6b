"""MIG card-type normalisation and slice placement on the memory-slice axis.

Slots are bits of an int (bit i = memory slice i), so "does this instance overlap" is one AND.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from console.placement.mig_profiles import (
    A30_24GB,
    A100_40GB,
    A100_80GB,
    B200_180GB,
    CATALOGUE,
    GB200_186GB,
    H100_80GB,
    H100_94GB,
    H100_96GB,
    H200_141GB,
    RTX_PRO_5000_BLACKWELL,
    RTX_PRO_6000_BLACKWELL,
    MigCardType,
    MigProfile,
)
from console.placement.problem import MigSlice

# H800 and A800 are the export variants of H100-80GB and A100, with their MIG geometry.
_FAMILY = re.compile(r"(?<![A-Z0-9])(A100|A800|A30|H100|H800|H200|H20|GH200|GB200|B200)(?![0-9])")
_RTX_PRO = re.compile(r"RTX PRO (6000|5000)\b.*BLACKWELL")
# GH200's own 96 GB H100 (97,280 MiB); the 144 GB HBM3e GH200 has other, uncatalogued sizes.
_GH200_96GB_MAX_MIB = 100_000
_SIZE_GB = re.compile(r"(?<![0-9])(\d{2,3})\s*G(?:I?B)?(?![A-Z])")
_COMPUTE_INSTANCE_PREFIX = re.compile(r"^\d+c\.")
# Total memory nvidia-smi reports: A100-40GB 40960 MiB, A100-80GB 81920, H100-80GB 81559,
# H100 NVL 95830; the split points sit between them.
_A100_80GB_MIN_MIB = 60000
_H100_80GB_MAX_MIB = 86000


class UnknownMigCardType(ValueError):
    pass


def mig_card_type(type_name: str, memory_mib: int | None = None) -> MigCardType:
    """Map a card type as inventories spell it ("A100-SXM4-80GB", "NVIDIA H200", "NVIDIA H100
    80GB HBM3") to its MIG catalogue entry. The memory total settles names that omit the size
    ("NVIDIA A100-PCIE"). Raises UnknownMigCardType for a type without a catalogued MIG geometry.
    """
    upper = type_name.upper()
    rtx = _RTX_PRO.search(upper)
    if rtx:
        return RTX_PRO_6000_BLACKWELL if rtx.group(1) == "6000" else RTX_PRO_5000_BLACKWELL
    family = _FAMILY.search(upper)
    size = _SIZE_GB.search(upper)
    size_gb = int(size.group(1)) if size else None
    card_type = _catalogue_entry(family.group(1), size_gb, upper, memory_mib) if family else None
    if card_type is None:
        known = ", ".join(sorted(CATALOGUE))
        raise UnknownMigCardType(
            f"no MIG profile catalogue for card type {type_name!r} (catalogued: {known})"
        )
    return card_type


def _catalogue_entry(
    family: str, size_gb: int | None, upper_name: str, memory_mib: int | None
) -> MigCardType | None:
    if family in ("A100", "A800"):
        if size_gb is None and memory_mib is not None:
            size_gb = 80 if memory_mib >= _A100_80GB_MIN_MIB else 40
        return {40: A100_40GB, 80: A100_80GB}.get(size_gb or 0)
    if family in ("H100", "H800"):
        # H100 NVL and the 94 GB SXM/PCIe cards have their own profiles (3g.47gb, ...).
        unnamed_80gb = (
            size_gb is None
            and "NVL" not in upper_name
            and (memory_mib is None or memory_mib <= _H100_80GB_MAX_MIB)
        )
        if size_gb == 80 or unnamed_80gb:
            return H100_80GB
        return {94: H100_94GB, 96: H100_96GB}.get(
            size_gb or 0, H100_94GB if size_gb is None else None
        )
    if family == "GH200":
        # NVML names it "NVIDIA GH200 480GB" (CPU and GPU memory together): go by the card's.
        fits = memory_mib is None or memory_mib <= _GH200_96GB_MAX_MIB
        return H100_96GB if fits and size_gb in (None, 96, 480) else None
    if family == "H20":
        # The 96 GB H20 ("NVIDIA H20", device 0x2329: nvidia-mig-parted's config-default.yaml
        # lists it with the 96 GB H100's 1g.12gb/2g.24gb/3g.48gb) has that card's geometry. The
        # 141 GB HBM3e H20 is not that card: NVML names it "NVIDIA H20-3e", and where a name
        # hides it its total does. Its instance sizes are in no table the catalogue was built
        # from, so it stays uncatalogued rather than being given the 96 GB card's profiles.
        hbm3e = "H20-3E" in upper_name or size_gb == 141
        fits = memory_mib is None or memory_mib <= _GH200_96GB_MAX_MIB
        return H100_96GB if size_gb in (None, 96) and fits and not hbm3e else None
    if family == "B200":
        return B200_180GB if size_gb in (None, 180) else None
    if family == "GB200":
        return GB200_186GB if size_gb in (None, 186) else None
    if family == "H200":
        return H200_141GB if size_gb is None or size_gb >= 140 else None
    return A30_24GB if size_gb in (None, 24) else None


def canonical_profile_name(raw: str) -> str:
    """'MIG 3g.71gb' and the compute-instance form '1c.3g.71gb' both name GPU instance 3g.71gb."""
    name = raw.strip().lower().removeprefix("mig").strip()
    return _COMPUTE_INSTANCE_PREFIX.sub("", name)


def occupied_mask(slices: Iterable[MigSlice]) -> int:
    mask = 0
    for piece in slices:
        mask |= piece.profile.slot_mask(piece.start)
    return mask


def free_starts(profile: MigProfile, occupied: int) -> tuple[int, ...]:
    return tuple(s for s in profile.starts if not profile.slot_mask(s) & occupied)


def creatable_profiles(card_type: MigCardType) -> tuple[MigProfile, ...]:
    """Profiles the solver may create: smallest memory first, then fewest slices."""
    profiles = (p for p in card_type.profiles if not p.media_extensions)
    return tuple(sorted(profiles, key=lambda p: (p.memory_mib, p.memory_slices, p.compute_slices)))


def smallest_fitting_profile(card_type: MigCardType, memory_mib: int) -> MigProfile | None:
    return next((p for p in creatable_profiles(card_type) if p.memory_mib >= memory_mib), None)


def placement_count(card_type: MigCardType, occupied: int = 0) -> int:
    """How many (profile, start) placements are still possible: a measure of options left."""
    return sum(len(free_starts(p, occupied)) for p in creatable_profiles(card_type))


def choose_slice(
    card_type: MigCardType, occupied: int, memory_mib: int
) -> tuple[MigProfile, int] | None:
    """The smallest profile that holds `memory_mib` and has a free valid start, and the start
    that keeps the most placements open for later instances (ties: the highest start, which
    keeps slice 0 free for the 4g and 7g profiles that can only start there)."""
    for profile in creatable_profiles(card_type):
        if profile.memory_mib < memory_mib:
            continue
        starts = free_starts(profile, occupied)
        if starts:
            best_start = max(
                starts,
                key=lambda s: (placement_count(card_type, occupied | profile.slot_mask(s)), s),
            )
            return profile, best_start
    return None


def inferred_starts(
    card_type: MigCardType, instances: dict[int, str], taken: int = 0
) -> dict[int, int] | None:
    """Start slots for GPU instances (id -> profile name) known only by their profiles, found
    by a small backtracking search, largest first; None when they cannot share one card.

    NVML tells an instance's start only to a privileged caller. Inferred starts are kept as
    such: the slot map they draw is a valid placement of the card's instances, which may
    differ from the card's own (and so may the free slots it leaves). `taken`: the slots of
    the instances whose starts are known already.
    """
    profiles = {
        gi: card_type.profile(canonical_profile_name(name)) for gi, name in instances.items()
    }
    if any(profile is None for profile in profiles.values()):
        return None
    order = sorted(profiles, key=lambda gi: (-profiles[gi].memory_slices, gi))

    def search(taken: int, placed: dict[int, int]) -> dict[int, int] | None:
        if len(placed) == len(order):
            return placed
        gi = order[len(placed)]
        profile = profiles[gi]
        for start in free_starts(profile, taken):
            found = search(taken | profile.slot_mask(start), {**placed, gi: start})
            if found is not None:
                return found
        return None

    return search(taken, {})


def layout_errors(card_type: MigCardType, slices: Iterable[MigSlice]) -> list[str]:
    """Why a set of existing slices cannot be on one card (invalid start, overlap, two +me)."""
    errors: list[str] = []
    occupied = 0
    media_holders: list[str] = []
    for piece in slices:
        profile = piece.profile
        if piece.start not in profile.starts:
            starts = ", ".join(map(str, profile.starts))
            errors.append(f"{profile.name} cannot start at slot {piece.start} (valid: {starts})")
            continue
        mask = profile.slot_mask(piece.start)
        if mask & occupied:
            errors.append(f"{profile.name} at slot {piece.start} overlaps another slice")
        occupied |= mask
        if profile.media_extensions:
            media_holders.append(profile.name)
    if len(media_holders) > 1:
        errors.append(f"only one +me slice fits on a card, found {len(media_holders)}")
    return errors


def free_slots(card_type: MigCardType, occupied: int) -> tuple[int, ...]:
    return tuple(i for i in range(card_type.memory_slices) if not occupied >> i & 1)
