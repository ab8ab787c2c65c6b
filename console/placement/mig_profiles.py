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
Left out: H100 94 GB (NVL) and 96 GB (GH200), H20, H800, B200 and newer. Their profile names
and geometry are documented, but no capture of their instance sizes was available. Compute
instances inside a GPU instance (e.g. 1c.3g.71gb) are not modelled: the solver places whole GPU
instances.
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

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


_ONE_SLICE = (0, 1, 2, 3, 4, 5, 6)
_DOUBLE_ONE_G = (0, 2, 4, 6)
_TWO_G = (0, 2, 4)
_THREE_G = (0, 4)
_FULL = (0,)


def _eight_slice_card(
    name: str,
    one_g: tuple[str, int],
    one_g_double: tuple[str, int],
    two_g: tuple[str, int],
    four_slices: tuple[str, str, int],
    seven_g: tuple[str, int],
) -> MigCardType:
    three_g_name, four_g_name, half_card_mib = four_slices
    return MigCardType(
        name=name,
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

CATALOGUE: dict[str, MigCardType] = {
    card.name: card for card in (A100_40GB, A100_80GB, H100_80GB, H200_141GB, A30_24GB)
}
