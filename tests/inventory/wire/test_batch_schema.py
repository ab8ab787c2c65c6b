"""The batch check: every hostile value is refused with its reason and path, before any write."""

import copy
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.wire.schema import BatchRejected, Window, check_batch
from tests.conftest import FIXTURES
from tests.examples import examples

# Three batches the host agent published on a real H200 (docs/gpu-check.md).
REAL = json.loads((FIXTURES / "nvml-h200" / "agent-batches.json").read_text())
NOW = REAL[-1]["interval_end"] + 5
WINDOW = Window.around(NOW, retention_s=14 * 86400, skew_s=300)


def real_batch() -> dict:
    return copy.deepcopy(REAL[1])


def full_batch() -> dict:
    """The real batch with the parts that H200 run had none of: an engine and an allocator."""
    payload = real_batch()
    payload["processes"][0]["allocator"] = {
        "reserved_bytes": 4 * 2**30,
        "allocated_bytes": 3 * 2**30,
        "inactive_split_bytes": 2**28,
        "largest_free_block_bytes": 2**29,
    }
    payload["engines"] = [
        {"deployment_id": "7", "engine": "vllm", "kv_cache_usage_max": 0.5,
         "requests_running_max": 3, "latency": {"e2e": {"count": 9.0, "p99_s": 0.8}}}
    ]  # fmt: skip
    payload["events"] = [{"kind": "oom", "ts": NOW - 5, "card_index": 0,
                          "detail": {"pid": 456, "requested_bytes": 2**30}}]  # fmt: skip
    return payload


def test_what_a_real_agent_published_passes():
    for payload in [*REAL, full_batch()]:
        check_batch(payload, WINDOW)


def set_value(path: str, value):
    def mutate(payload):
        *parents, last = path.split(".")
        target = payload
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is _DELETE:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()


# (change, reason code, path): None where the batch stays sound.
HOSTILE = [
    (set_value("processes.0.pid", _DELETE), "missing", "processes[0].pid"),
    (set_value("seq", -5), "out_of_range", "seq"),
    (set_value("cards.0.samples", 40000), "out_of_range", "cards[0].samples"),
    (set_value("processes.0.pid", 2**40), "out_of_range", "processes[0].pid"),
    (set_value("cards.0.used_bytes_max", -1), "out_of_range", "cards[0].used_bytes_max"),
    (set_value("cards.0.used_bytes_max", 2 * 150754820096), "over_total",
     "cards[0].used_bytes_max"),
    (set_value("processes.0.used_bytes_max", 2 * 150754820096), "over_total",
     "processes[0].used_bytes_max"),
    (set_value("cards.0.free_bytes_min", 2 * 150754820096), "over_total",
     "cards[0].free_bytes_min"),
    (set_value("cards.0.reserved_bytes_last", 2 * 150754820096), "over_total",
     "cards[0].reserved_bytes_last"),
    (set_value("interval_end", 4102444800.0), "in_the_future", "interval_end"),  # 2100
    (set_value("interval_start", NOW - 60 * 86400), "too_old", "interval_start"),
    (set_value("cards.0.util_gpu_max", 101), "out_of_range", "cards[0].util_gpu_max"),
    (set_value("cards.0.total_bytes", 2**64 + 1), "out_of_range", "cards[0].total_bytes"),
    (set_value("cards.0.total_bytes", float("nan")), "bad_type", "cards[0].total_bytes"),
    (set_value("engines", [{"deployment_id": "4", "kv_cache_usage_max": math.inf}]),
     "not_finite", "engines[0].kv_cache_usage_max"),
    (set_value("processes.0.name", "python\x00"), "nul_byte", "processes[0].name"),
    (set_value("processes.0.name", "x" * 10_000), "bad_length", "processes[0].name"),
    (set_value("cards.0.uuid", "GPU-" + "f" * 200), "bad_length", "cards[0].uuid"),
    (set_value("cards.0.lost", "no"), "bad_type", "cards[0].lost"),
    (set_value("cards.0.index", True), "bad_type", "cards[0].index"),
    (set_value("cards.0.index", 1.0), "bad_type", "cards[0].index"),
    (set_value("processes.0.deployment_id", 41), "bad_type", "processes[0].deployment_id"),
    (set_value("processes.0.deployment_id", "gpu-check"), None, None),  # not ours: unmapped
    (set_value("processes.0.card_index", _DELETE), None, None),  # card_uuid still names it
    (set_value("batch_id", "not-a-uuid"), "bad_uuid", "batch_id"),
    (set_value("sampler_id", 7), "bad_uuid", "sampler_id"),
    (set_value("schema", "gpu-telemetry-batch/0"), "unknown_schema", "schema"),
    (set_value("cards", {"index": 0}), "bad_type", "cards"),
    (set_value("cards.0", "card"), "bad_type", "cards[0]"),
    (set_value("processes", [{"card_index": 0, "pid": 1}] * 9000), "too_many", "processes"),
    (set_value("events", [{"kind": "oom", "ts": NOW, "detail": {"pid": -1}}]),
     "out_of_range", "events[0].detail.pid"),
    (set_value("events", [{"kind": "oom", "ts": NOW + 86400}]), "in_the_future", "events[0].ts"),
    (set_value("events", [{"kind": "xid", "ts": NOW, "detail": {"note": {"a": "\x00"}}}]),
     "nul_byte", "events[0].detail.note.a"),
    (set_value("agent", {"outbox_depth": -3}), "out_of_range", "agent.outbox_depth"),
    (set_value("processes.0.allocator", {"reserved_bytes": "4G"}), "bad_type",
     "processes[0].allocator.reserved_bytes"),
    (set_value("engines", [{"deployment_id": "4", "latency": [0.5]}]), "bad_type",
     "engines[0].latency"),
    (set_value("host", ""), "bad_length", "host"),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "code", "path"), HOSTILE)
def test_each_hostile_value_is_refused_with_its_code_and_path(mutate, code, path):
    payload = real_batch()
    mutate(payload)
    if code is None:
        check_batch(payload, WINDOW)
        return
    with pytest.raises(BatchRejected) as rejected:
        check_batch(payload, WINDOW)
    assert (rejected.value.code, rejected.value.path) == (code, path)


def test_a_pid_twice_on_one_card_is_refused_but_an_mps_client_listed_twice_is_not():
    payload = real_batch()
    payload["processes"].append(copy.deepcopy(payload["processes"][0]))
    with pytest.raises(BatchRejected, match="PID 456 twice"):
        check_batch(payload, WINDOW)
    payload["processes"][1]["kind"] = "mps"  # NVML lists an MPS client in both lists
    check_batch(payload, WINDOW)


def test_a_card_index_twice_is_refused():
    payload = real_batch()
    payload["cards"].append(
        {**payload["cards"][0], "uuid": "GPU-00000000-0000-0000-0000-000000000001"}
    )
    with pytest.raises(BatchRejected, match="card index 0 twice"):
        check_batch(payload, WINDOW)


def test_event_details_nested_too_deep_are_refused():
    deep: dict = {}
    node = deep
    for _ in range(20):
        node["next"] = {}
        node = node["next"]
    payload = real_batch()
    payload["events"] = [{"kind": "xid", "ts": NOW, "detail": deep}]
    with pytest.raises(BatchRejected) as rejected:
        check_batch(payload, WINDOW)
    assert rejected.value.code == "too_deep"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20,
)  # fmt: skip
PATHS = st.sampled_from(
    ["seq", "host", "interval_start", "cards", "cards.0", "cards.0.index", "cards.0.total_bytes",
     "processes", "processes.0", "processes.0.pid", "processes.0.allocator",
     "processes.0.allocator.reserved_bytes", "engines", "engines.0", "engines.0.latency",
     "engines.0.latency.e2e", "engines.0.latency.e2e.p99_s", "events", "events.0",
     "events.0.detail", "events.0.detail.pid", "agent", "faults", "mig_devices"]
)  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(path=PATHS, value=JSON_VALUES)
def test_any_value_anywhere_is_either_accepted_or_refused_with_a_reason(path, value):
    payload = full_batch()
    set_value(path, value)(payload)
    try:
        check_batch(payload, WINDOW)
    except BatchRejected as rejected:
        assert rejected.code and rejected.message
