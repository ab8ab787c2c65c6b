"""Validation of the JSON placement request into a Problem, with errors that name the field.

Request shape (memory in MiB; see README.md in this package for the full contract):

    {"gpus": [{"id", "host", "memory_mib", "type"?, "used_mib"?, "mig"?, "models"?,
               "mig_slices"?: [{"profile", "start", "model"?}]}],
     "models": [{"name", "memory_mib", "gpus"?, "exclusive"?, "priority"?, "isolation"?}],
     "policy"?: {"method"?, "time_limit_s"?, "headroom_mib"?, "whole_card"?},
     "about"?: anything (ignored)}

Every problem found is reported, not only the first, as a PlacementInputError carrying a list
of FieldError such as ``models[2].memory_mib: must be >= 0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from console.placement.mig import (
    UnknownMigCardType,
    canonical_profile_name,
    layout_errors,
    mig_card_type,
)
from console.placement.mig_profiles import MigCardType
from console.placement.problem import (
    Card,
    Isolation,
    Method,
    MigSlice,
    ModelRequest,
    Policy,
    Problem,
)

METHODS: tuple[Method, ...] = ("greedy", "exact", "auto")
ISOLATIONS: tuple[Isolation, ...] = ("any", "group", "mps", "mig")
MAX_TIME_LIMIT_S = 600
# Bounds that keep every sum the solver forms within 64-bit integers: 16 TiB of memory on one
# card, a model over 1024 cards, and priorities that weigh up to a million.
MAX_MEMORY_MIB = 16 * 1024**2
MAX_MODEL_GPUS = 1024
MAX_PRIORITY = 1_000_000
DEFAULT_POLICY = {"method": "auto", "time_limit_s": 5, "headroom_mib": 0, "whole_card": False}
DEFAULT_PRIORITY = 1

_TOP_KEYS = ({"gpus", "models"}, {"policy", "about"})
_GPU_KEYS = ({"id", "host", "memory_mib"}, {"type", "used_mib", "mig", "models", "mig_slices"})
_SLICE_KEYS = ({"profile", "start"}, {"model"})
_MODEL_KEYS = ({"name", "memory_mib"}, {"gpus", "exclusive", "priority", "isolation"})
_POLICY_KEYS = (set(), set(DEFAULT_POLICY))


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class PlacementInputError(ValueError):
    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("; ".join(map(str, errors)))

    def as_dicts(self) -> list[dict[str, str]]:
        return [{"field": e.field, "message": e.message} for e in self.errors]


class _Checker:
    """Reads typed fields out of untrusted JSON, recording an error instead of raising."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, field: str, message: str) -> None:
        # One error per field: a missing key is "is required", not also "must be a string".
        if all(error.field != field for error in self.errors):
            self.errors.append(FieldError(field, message))

    def mapping(
        self, value: object, field: str, keys: tuple[set[str], set[str]]
    ) -> dict[str, Any] | None:
        required, optional = keys
        if not isinstance(value, dict):
            self.fail(field, f"must be an object, got {_json_type(value)}")
            return None
        prefix = f"{field}." if field else ""
        for key in sorted(required - value.keys()):
            self.fail(f"{prefix}{key}", "is required")
        allowed = ", ".join(sorted(required | optional))
        for key in sorted(set(value) - required - optional, key=str):
            self.fail(f"{prefix}{key}", f"unknown key (allowed: {allowed})")
        return cast(dict[str, Any], value)

    def integer(
        self, value: object, field: str, minimum: int, maximum: int = MAX_MEMORY_MIB
    ) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(field, f"must be an integer, got {_json_type(value)}")
            return None
        if value < minimum:
            self.fail(field, f"must be >= {minimum}")
            return None
        if value > maximum:
            self.fail(field, f"must be <= {maximum}")
            return None
        return value

    def boolean(self, value: object, field: str) -> bool | None:
        if not isinstance(value, bool):
            self.fail(field, f"must be true or false, got {_json_type(value)}")
            return None
        return value

    def text(self, value: object, field: str) -> str | None:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"must be a non-empty string, got {_json_type(value)}")
            return None
        return value

    def choice(self, value: object, field: str, options: tuple[str, ...]) -> str | None:
        if value not in options:
            self.fail(field, f"must be one of {', '.join(options)}, got {value!r}")
            return None
        return cast(str, value)

    def listing(self, value: object, field: str) -> list[Any] | None:
        if not isinstance(value, list):
            self.fail(field, f"must be a list, got {_json_type(value)}")
            return None
        return value


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def validate_problem(raw: object) -> Problem:
    """Check a decoded JSON request and return the Problem it describes.

    Raises PlacementInputError listing every field that is wrong.
    """
    check = _Checker()
    top = check.mapping(raw, "", _TOP_KEYS)
    if top is None:
        raise PlacementInputError(check.errors)
    policy = _policy(check, top.get("policy", {}))
    headroom = policy.headroom_mib if policy else 0
    cards = _cards(check, top.get("gpus"), headroom)
    models = _models(check, top.get("models"))
    if cards and models:
        _check_models_against_fleet(check, models, cards)
    if check.errors or policy is None or cards is None or models is None:
        raise PlacementInputError(check.errors)
    return Problem(cards=tuple(cards), models=tuple(models), policy=policy)


def _policy(check: _Checker, raw: object) -> Policy | None:
    fields = check.mapping(raw, "policy", _POLICY_KEYS)
    if fields is None:
        return None
    values = {**DEFAULT_POLICY, **fields}
    errors_before = len(check.errors)
    method = check.choice(values["method"], "policy.method", METHODS)
    time_limit = values["time_limit_s"]
    if isinstance(time_limit, bool) or not isinstance(time_limit, int | float):
        check.fail("policy.time_limit_s", f"must be a number, got {_json_type(time_limit)}")
    elif not 0 < time_limit <= MAX_TIME_LIMIT_S:
        check.fail("policy.time_limit_s", f"must be > 0 and <= {MAX_TIME_LIMIT_S}")
    headroom = check.integer(values["headroom_mib"], "policy.headroom_mib", 0)
    whole_card = check.boolean(values["whole_card"], "policy.whole_card")
    if None in (method, headroom, whole_card) or len(check.errors) > errors_before:
        return None
    return Policy(
        method=cast(Method, method),
        time_limit_s=float(time_limit),
        headroom_mib=cast(int, headroom),
        whole_card=cast(bool, whole_card),
    )


def _cards(check: _Checker, raw: object, headroom_mib: int) -> list[Card] | None:
    entries = check.listing(raw, "gpus")
    if entries is None:
        return None
    if not entries:
        check.fail("gpus", "must list at least one card")
        return None
    cards: list[Card] = []
    first_index_of: dict[str, int] = {}
    for index, entry in enumerate(entries):
        card = _card(check, entry, index, headroom_mib)
        if card is None:
            continue
        if card.id in first_index_of:
            check.fail(
                f"gpus[{index}].id",
                f"duplicate id {card.id!r} (also gpus[{first_index_of[card.id]}])",
            )
            continue
        first_index_of[card.id] = index
        cards.append(card)
    return cards if len(cards) == len(entries) else None


def _card(check: _Checker, raw: object, index: int, headroom_mib: int) -> Card | None:
    field = f"gpus[{index}]"
    fields = check.mapping(raw, field, _GPU_KEYS)
    if fields is None:
        return None
    errors_before = len(check.errors)
    card_id = check.text(fields.get("id"), f"{field}.id")
    host = check.text(fields.get("host"), f"{field}.host")
    card_type = fields.get("type", "")
    if not isinstance(card_type, str):
        check.fail(f"{field}.type", f"must be a string, got {_json_type(card_type)}")
    memory = check.integer(fields.get("memory_mib"), f"{field}.memory_mib", 1)
    used = check.integer(fields.get("used_mib", 0), f"{field}.used_mib", 0)
    if memory is not None and used is not None and used > memory:
        check.fail(f"{field}.used_mib", f"{used} MiB is more than the card's {memory} MiB")
    mig = check.boolean(fields.get("mig", False), f"{field}.mig")
    tenants = _tenants(check, fields.get("models", []), f"{field}.models")
    mig_type = None
    slices: tuple[MigSlice, ...] = ()
    if mig and isinstance(card_type, str):
        mig_type = _mig_type(check, card_type, memory, f"{field}.type")
    if "mig_slices" in fields:
        if not mig:
            check.fail(f"{field}.mig_slices", "only allowed on a card with mig: true")
        elif mig_type is not None:
            slices = _slices(check, fields["mig_slices"], mig_type, f"{field}.mig_slices")
    if mig and tenants and not slices:
        check.fail(
            f"{field}.mig_slices",
            "a MIG card with existing models must list the slices they occupy",
        )
    values = (card_id, host, memory, used, mig, tenants)
    if None in values or len(check.errors) > errors_before:
        return None
    return Card(
        index=index,
        id=cast(str, card_id),
        host=cast(str, host),
        memory_mib=cast(int, memory),
        used_mib=cast(int, used),
        mig=cast(bool, mig),
        tenants=cast(tuple[str, ...], tenants),
        mig_slices=slices,
        mig_type=mig_type,
        # MIG instances are hardware partitions with their own memory: headroom is for cards
        # whose memory the models share.
        headroom_mib=0 if mig else headroom_mib,
    )


def _tenants(check: _Checker, raw: object, field: str) -> tuple[str, ...] | None:
    names = check.listing(raw, field)
    if names is None:
        return None
    valid = [check.text(name, f"{field}[{i}]") for i, name in enumerate(names)]
    return None if None in valid else tuple(cast(list[str], valid))


def _mig_type(
    check: _Checker, card_type: str, memory: int | None, field: str
) -> MigCardType | None:
    try:
        return mig_card_type(card_type, memory)
    except UnknownMigCardType as error:
        check.fail(field, str(error))
        return None


def _slices(
    check: _Checker, raw: object, mig_type: MigCardType, field: str
) -> tuple[MigSlice, ...]:
    entries = check.listing(raw, field)
    if entries is None:
        return ()
    slices: list[MigSlice] = []
    for index, entry in enumerate(entries):
        entry_field = f"{field}[{index}]"
        fields = check.mapping(entry, entry_field, _SLICE_KEYS)
        if fields is None:
            continue
        name = check.text(fields.get("profile"), f"{entry_field}.profile")
        start = check.integer(fields.get("start"), f"{entry_field}.start", 0)
        model = fields.get("model")
        if model is not None and not (isinstance(model, str) and model.strip()):
            check.fail(f"{entry_field}.model", "must be a non-empty string or null")
        if name is None or start is None:
            continue
        profile = mig_type.profile(canonical_profile_name(name))
        if profile is None:
            known = ", ".join(p.name for p in mig_type.profiles)
            check.fail(
                f"{entry_field}.profile",
                f"{name!r} is not a {mig_type.name} profile (known: {known})",
            )
            continue
        slices.append(MigSlice(profile=profile, start=start, model=model))
    for message in layout_errors(mig_type, slices):
        check.fail(field, message)
    return tuple(slices)


def _models(check: _Checker, raw: object) -> list[ModelRequest] | None:
    entries = check.listing(raw, "models")
    if entries is None:
        return None
    models: list[ModelRequest] = []
    first_index_of: dict[str, int] = {}
    for index, entry in enumerate(entries):
        model = _model(check, entry, index)
        if model is None:
            continue
        if model.name in first_index_of:
            check.fail(
                f"models[{index}].name",
                f"duplicate name {model.name!r} (also models[{first_index_of[model.name]}])",
            )
            continue
        first_index_of[model.name] = index
        models.append(model)
    return models if len(models) == len(entries) else None


def _model(check: _Checker, raw: object, index: int) -> ModelRequest | None:
    field = f"models[{index}]"
    fields = check.mapping(raw, field, _MODEL_KEYS)
    if fields is None:
        return None
    errors_before = len(check.errors)
    name = check.text(fields.get("name"), f"{field}.name")
    memory = check.integer(fields.get("memory_mib"), f"{field}.memory_mib", 0)
    gpus = check.integer(fields.get("gpus", 1), f"{field}.gpus", 1, MAX_MODEL_GPUS)
    exclusive = check.boolean(fields.get("exclusive", False), f"{field}.exclusive")
    priority = check.integer(
        fields.get("priority", DEFAULT_PRIORITY), f"{field}.priority", 0, MAX_PRIORITY
    )
    isolation = check.choice(fields.get("isolation", "any"), f"{field}.isolation", ISOLATIONS)
    if isolation == "mig" and gpus is not None and gpus != 1:
        check.fail(f"{field}.gpus", "must be 1 when isolation is 'mig' (one slice on one card)")
    values = (name, memory, gpus, exclusive, priority, isolation)
    if None in values or len(check.errors) > errors_before:
        return None
    return ModelRequest(
        index=index,
        name=cast(str, name),
        memory_mib=cast(int, memory),
        gpus=cast(int, gpus),
        exclusive=cast(bool, exclusive),
        priority=cast(int, priority),
        isolation=cast(Isolation, isolation),
    )


def _check_models_against_fleet(
    check: _Checker, models: list[ModelRequest], cards: list[Card]
) -> None:
    largest = max(cards, key=lambda card: card.memory_mib)
    hosts: dict[str, int] = {}
    for card in cards:
        hosts[card.host] = hosts.get(card.host, 0) + 1
    biggest_host = max(hosts, key=lambda host: hosts[host])
    for model in models:
        field = f"models[{model.index}]"
        if model.memory_mib > largest.memory_mib:
            check.fail(
                f"{field}.memory_mib",
                f"{model.memory_mib} MiB is larger than any card "
                f"(largest: {largest.memory_mib} MiB, {largest.id})",
            )
        if model.gpus > hosts[biggest_host]:
            check.fail(
                f"{field}.gpus",
                f"needs {model.gpus} cards on one host; the largest host "
                f"({biggest_host}) has {hosts[biggest_host]}",
            )
