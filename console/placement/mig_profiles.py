"""MIG GPU-instance profiles per card type: memory, slices and valid start slots.

Geometry (NVIDIA MIG user guide, "Supported MIG Profiles", and `nvidia-smi mig -lgipp`): A100,
H100 and H200 have 8 memory slices and 7 compute slices; a profile occupies `memory_slices`
consecutive memory slices from one of its valid `starts`:

    1g          {0,1,2,3,4,5,6}:1     (no 1g starts on slice 7: it has no compute slice)
    1g double   {0,2,4,6}:2           (1g.10gb on A100-40GB, 1g.20gb on 80 GB, 1g.35gb on H200)
    2g          {0,2,4}:2
    3g          {0,4}:4               (a 3g takes four memory slices)
    4g          {0}:4
    7g          {0}:8

A30 has 4 memory and 4 compute slices: 1g {0,1,2,3}:1, 2g {0,2}:2, 4g {0}:4.

`+me` profiles carry the card's single set of media engines (JPEG/OFA), so at most one exists on
a card. They are listed so that existing slices can be described; the solver never creates one,
since a request cannot ask for media engines.

Memory is in MiB as nvidia-smi reports it for the instance (below the nominal "Ngb", because of
ECC and driver reservations). Sources, most trusted first:
  - H100-80GB 1g.10gb 9984, 2g.20gb 20096, 3g.40gb 40448 and H200 1g.18gb 16384, 2g.35gb 33280,
    3g.71gb 71424: the real captures in shared/fixtures/nvidia-smi/.
  - the remaining values: `nvidia-smi mig -lgip` listings ("Memory GiB" column, 2 decimals)
    converted to MiB. A profile sharing its memory slices with a captured one (1g.20gb with
    2g.20gb, 4g with 3g) has the same memory.
  - where drivers disagree (A100-40GB: R470-era listings show 9.62/19.50/39.25 GiB, later ones
    9.75/19.62/39.38 GiB), the smaller value is used, so a model placed fits on either driver.
  - cards without a capture (H100 94 GB / NVL, the 96 GB H100 of GH200 and the 96 GB H20,
    B200, GB200, RTX PRO 6000 / 5000 Blackwell): profile names, slices and placements from the
    MIG user guide ("Supported MIG Profiles"; names cross-checked with NVIDIA go-nvml's
    pkg/nvml/mock/shared/gpus/b200.go for B200). Their memory is an estimate,
    `estimated_instance_mib`: the name's nominal GB as MiB x 0.93, below every captured
    instance's real size (H200 1g.18gb: estimate 15,964, real 16,384 MiB; H100 3g.40gb: 35,475
    vs 40,448), so a model planned on the estimate fits the real instance. `memory_estimated`
    says so; NVML's figure for an existing instance always wins over the catalogue.
  - H800 and A800 have the H100-80GB and A100 geometry and names, and share their entries.
Compute instances inside a GPU instance (e.g. 1c.3g.71gb and 2c.3g.71gb) share its memory: the
solver places whole GPU instances; the inventory groups compute instances by GPU instance.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    name: str
    memory_mib: int
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    media_extensions: bool = False

    def slot_mask(self, start: int) -> int:
        """Bit i set when memory slice i is taken by this profile placed at `start`."""
        return ((1 << self.memory_slices) - 1) << start


@dataclass(frozen=True)
class MigCardType:
    name: str
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]
    memory_estimated: bool = False  # instance sizes from the profile names, not a capture

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


_ONE_SLICE = (0, 1, 2, 3, 4, 5, 6)
_DOUBLE_ONE_G = (0, 2, 4, 6)
_TWO_G = (0, 2, 4)
_THREE_G = (0, 4)
_FULL = (0,)


def estimated_instance_mib(profile_name: str) -> int:
    """A conservative instance size from a profile's name ("3g.90gb" -> 90 GB): the nominal GB
    in MiB, less 7%, which is below the real size of every captured instance."""
    nominal_gb = int(profile_name.split(".")[1].removesuffix("gb"))
    return nominal_gb * 1000**3 * 93 // (100 * 1024**2)


def _eight_slice_card(
    name: str,
    one_g: tuple[str, int],
    one_g_double: tuple[str, int],
    two_g: tuple[str, int],
    four_slices: tuple[str, str, int],
    seven_g: tuple[str, int],
    memory_estimated: bool = False,
) -> MigCardType:
    three_g_name, four_g_name, half_card_mib = four_slices
    return MigCardType(
        name=name,
        memory_estimated=memory_estimated,
        memory_slices=8,
        compute_slices=7,
        profiles=(
            MigProfile(one_g[0], one_g[1], 1, 1, _ONE_SLICE),
            MigProfile(f"{one_g[0]}+me", one_g[1], 1, 1, _ONE_SLICE, media_extensions=True),
            MigProfile(one_g_double[0], one_g_double[1], 1, 2, _DOUBLE_ONE_G),
            MigProfile(two_g[0], two_g[1], 2, 2, _TWO_G),
            MigProfile(three_g_name, half_card_mib, 3, 4, _THREE_G),
            MigProfile(four_g_name, half_card_mib, 4, 4, _FULL),
            MigProfile(seven_g[0], seven_g[1], 7, 8, _FULL),
        ),
    )


A100_40GB = _eight_slice_card(
    "A100-40GB",
    one_g=("1g.5gb", 4864),
    one_g_double=("1g.10gb", 9856),
    two_g=("2g.10gb", 9856),
    four_slices=("3g.20gb", "4g.20gb", 19968),
    seven_g=("7g.40gb", 40192),
)

A100_80GB = _eight_slice_card(
    "A100-80GB",
    one_g=("1g.10gb", 9728),
    one_g_double=("1g.20gb", 19968),
    two_g=("2g.20gb", 19968),
    four_slices=("3g.40gb", "4g.40gb", 40192),
    seven_g=("7g.80gb", 80896),
)

H100_80GB = _eight_slice_card(
    "H100-80GB",
    one_g=("1g.10gb", 9984),
    one_g_double=("1g.20gb", 20096),
    two_g=("2g.20gb", 20096),
    four_slices=("3g.40gb", "4g.40gb", 40448),
    seven_g=("7g.80gb", 81152),
)

H200_141GB = _eight_slice_card(
    "H200-141GB",
    one_g=("1g.18gb", 16384),
    one_g_double=("1g.35gb", 33280),
    two_g=("2g.35gb", 33280),
    four_slices=("3g.71gb", "4g.71gb", 71424),
    seven_g=("7g.141gb", 143360),
)

A30_24GB = MigCardType(
    name="A30-24GB",
    memory_slices=4,
    compute_slices=4,
    profiles=(
        MigProfile("1g.6gb", 5952, 1, 1, (0, 1, 2, 3)),
        MigProfile("1g.6gb+me", 5952, 1, 1, (0, 1, 2, 3), media_extensions=True),
        MigProfile("2g.12gb", 11968, 2, 2, (0, 2)),
        MigProfile("2g.12gb+me", 11968, 2, 2, (0, 2), media_extensions=True),
        MigProfile("4g.24gb", 24000, 4, 4, (0,)),
    ),
)


def _estimated_eight_slice_card(name: str, one: str, double: str, half: str, whole: str):
    """An 8-slice card known by its profile names alone (MIG user guide), sizes estimated."""
    return _eight_slice_card(
        name,
        one_g=(f"1g.{one}", estimated_instance_mib(f"1g.{one}")),
        one_g_double=(f"1g.{double}", estimated_instance_mib(f"1g.{double}")),
        two_g=(f"2g.{double}", estimated_instance_mib(f"2g.{double}")),
        four_slices=(f"3g.{half}", f"4g.{half}", estimated_instance_mib(f"3g.{half}")),
        seven_g=(f"7g.{whole}", estimated_instance_mib(f"7g.{whole}")),
        memory_estimated=True,
    )


H100_94GB = _estimated_eight_slice_card("H100-94GB", "12gb", "24gb", "47gb", "94gb")
# The H100 of GH200 and the 96 GB H20 carry 96 GB and the same profiles (not the 141 GB H20).
H100_96GB = _estimated_eight_slice_card("H100-96GB", "12gb", "24gb", "48gb", "96gb")
B200_180GB = _estimated_eight_slice_card("B200-180GB", "23gb", "45gb", "90gb", "180gb")
GB200_186GB = _estimated_eight_slice_card("GB200-186GB", "23gb", "47gb", "93gb", "186gb")


def _rtx_pro_blackwell(name: str, slices: int) -> MigCardType:
    """RTX PRO Blackwell: 24 GB slices, one compute slice each (6000: 4, 5000: 2)."""
    candidates = [(1, "1g.24gb"), (2, "2g.48gb"), (4, "4g.96gb")]
    profiles = tuple(
        MigProfile(
            profile,
            estimated_instance_mib(profile),
            size,
            size,
            tuple(range(0, slices - size + 1, size)),
        )
        for size, profile in candidates
        if size <= slices
    )
    return MigCardType(name, slices, slices, profiles, memory_estimated=True)


RTX_PRO_6000_BLACKWELL = _rtx_pro_blackwell("RTX-PRO-6000-Blackwell-96GB", 4)
RTX_PRO_5000_BLACKWELL = _rtx_pro_blackwell("RTX-PRO-5000-Blackwell-48GB", 2)

CATALOGUE: dict[str, MigCardType] = {
    card.name: card
    for card in (
        A100_40GB,
        A100_80GB,
        H100_80GB,
        H200_141GB,
        A30_24GB,
        H100_94GB,
        H100_96GB,
        B200_180GB,
        GB200_186GB,
        RTX_PRO_6000_BLACKWELL,
        RTX_PRO_5000_BLACKWELL,
    )
}
