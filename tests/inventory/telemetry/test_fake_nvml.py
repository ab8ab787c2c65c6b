"""The fake NVML against the real binding (pynvml) and the real captures."""

from __future__ import annotations

import ast
import re

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.telemetry import fake_nvml
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import (
    CATALOGUE,
    H200_CAPTURED_LAYOUT,
    MIB,
    build_card,
    gpu_type,
)
from tests.examples import examples

from .conftest import (
    FIXTURES,
    capture,
    h100_card,
    h200_mig_card,
    mib_field,
    nvml_for,
    query_sections,
)

PYNVML_ERROR_CONSTANTS = {n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_ERROR_")}


def test_every_pynvml_error_code_exists_in_the_fake_with_the_same_value():
    for name, value in PYNVML_ERROR_CONSTANTS.items():
        assert getattr(fake_nvml, name) == value, name


def test_error_classes_have_pynvml_names_and_codes():
    real_classes = {n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVMLError_")}
    fake_classes = {n: getattr(fake_nvml, n) for n in dir(fake_nvml) if n.startswith("NVMLError_")}
    assert set(fake_classes) == set(real_classes)
    for name, real_class in real_classes.items():
        fake_class = fake_classes[name]
        assert issubclass(fake_class, fake_nvml.NVMLError)
        assert fake_class().value == real_class().value, name


def test_nvmlerror_of_a_code_dispatches_to_the_subclass_as_pynvml_does():
    for code in PYNVML_ERROR_CONSTANTS.values():
        real, fake = pynvml.NVMLError(code), fake_nvml.NVMLError(code)
        assert type(fake).__name__ == type(real).__name__
        assert fake.value == real.value == code
        assert isinstance(fake, fake_nvml.NVMLError)
    # an unknown code stays the base class in both
    assert type(pynvml.NVMLError(12345)) is pynvml.NVMLError
    assert type(fake_nvml.NVMLError(12345)) is fake_nvml.NVMLError


def test_error_messages_match_pynvml_for_codes_it_knows_without_the_library():
    for code in pynvml.NVMLError._errcode_to_string:
        assert str(fake_nvml.NVMLError(code)) == str(pynvml.NVMLError(code))


def test_the_fake_instance_exposes_errors_and_constants_like_the_module():
    nvml = nvml_for()
    assert nvml.NVMLError_GpuIsLost is fake_nvml.NVMLError_GpuIsLost
    for name in (
        "NVML_COMPUTEMODE_DEFAULT",
        "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS",
        "NVML_DEVICE_MIG_ENABLE",
        "NVML_DEVICE_MIG_DISABLE",
        "nvmlMemory_v2",
        "nvmlEventTypeXidCriticalError",
        "NVML_ERROR_TIMEOUT",
    ):
        assert getattr(nvml, name) == getattr(pynvml, name), name


def _field_names(struct) -> set[str]:
    return {name for name, *_ in struct._fields_}


@pytest.mark.parametrize(
    ("fake_struct", "real_struct"),
    [
        (fake_nvml.c_nvmlMemory_t, pynvml.c_nvmlMemory_t),
        (fake_nvml.c_nvmlMemory_v2_t, pynvml.c_nvmlMemory_v2_t),
        (fake_nvml.c_nvmlUtilization_t, pynvml.c_nvmlUtilization_t),
        (fake_nvml.c_nvmlProcessInfo_t, pynvml.c_nvmlProcessInfo_v3_t),
        (fake_nvml.c_nvmlEventData_t, pynvml.c_nvmlEventData_t),
    ],
)
def test_struct_attributes_match_pynvml(fake_struct, real_struct):
    assert set(fake_struct.__slots__) == _field_names(real_struct)


def test_functions_the_collector_calls_exist_in_pynvml_with_the_same_parameters():
    import inspect

    fake = nvml_for()
    for name in [n for n in dir(FakeNvml) if n.startswith("nvml") and callable(getattr(fake, n))]:
        real = getattr(pynvml, name, None)
        assert real is not None, f"{name} is not a pynvml function"
        if name == "nvmlExceptionClass":
            continue
        fake_params = list(inspect.signature(getattr(fake, name)).parameters)
        real_params = list(inspect.signature(real).parameters)
        if real_params != ["args", "kwargs"]:  # decorated in pynvml: nothing to compare
            assert len(fake_params) == len(real_params), name


def test_calls_before_init_raise_uninitialized():
    nvml = nvml_for(h100_card("h", 0))
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetCount() == 1
    nvml.nvmlShutdown()
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=20_000), max_size=6))
def test_memory_v2_total_is_reserved_plus_used_plus_free(process_mib):
    card = h100_card(
        "h", 0, [FakeProcess(100 + i, "p", m * MIB) for i, m in enumerate(process_mib)]
    )
    nvml = nvml_for(card)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    assert memory.version == pynvml.nvmlMemory_v2
    assert memory.total == memory.reserved + memory.used + memory.free
    assert memory.free >= 0
    v1 = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert not hasattr(v1, "reserved")
    # v1 folds the driver reserve into "used", as the real driver does
    assert v1.used == memory.used + memory.reserved and v1.free == memory.free


def test_h200_mig_card_reads_like_the_capture():
    text = capture("linux-x86_64__nvidia-h200-mig__590.48.01.txt")
    loaded = query_sections(text)[1]
    nvml = nvml_for(h200_mig_card("h", 0))
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetName(handle) == "NVIDIA H200"
    memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    assert memory.total // MIB == mib_field(loaded, "FB Memory Usage", "Total")[0]
    assert memory.reserved // MIB == mib_field(loaded, "FB Memory Usage", "Reserved")[0]
    # card "used" under load within a few MiB of the capture's (nvidia-smi rounds each row)
    assert abs(memory.used // MIB - mib_field(loaded, "FB Memory Usage", "Used")[0]) <= 40
    assert nvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    with pytest.raises(fake_nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetUtilizationRates(handle)
    totals = mib_field(loaded, "Shared FB Memory Usage", "Total")
    used = mib_field(loaded, "Shared FB Memory Usage", "Used")
    listed = re.findall(r"^\s+MIG (\S+)\s+Device\s+\d+:", text, re.M)
    slots = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    seen = []
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except fake_nvml.NVMLError_NotFound:
            continue
        seen.append(nvml.nvmlDeviceGetName(mig).split(" MIG ")[1])
        mig_memory = nvml.nvmlDeviceGetMemoryInfo(mig, version=nvml.nvmlMemory_v2)
        assert mig_memory.total // MIB == totals[slot]
        assert mig_memory.reserved == 0
        # the capture's instance usage carries ~4 MiB of driver overhead per process on top
        assert abs(mig_memory.used // MIB - used[slot]) <= 16
    assert seen == listed


def test_catalogue_totals_and_reserve_match_every_capture():
    for gpu in CATALOGUE.values():
        if "not captured" in gpu.source:
            continue
        text = capture(gpu.source.split(",")[0])
        for section in query_sections(text):
            assert mib_field(section, "FB Memory Usage", "Total") == [gpu.total_mib], gpu.key
            assert mib_field(section, "FB Memory Usage", "Reserved") == [gpu.reserved_mib]
        assert f"Product Name                                       : {gpu.product_name}" in text


def test_mig_profile_sizes_match_the_mig_captures():
    for key, filename in (
        ("H100-SXM5-80GB", "linux-x86_64__nvidia-h100-mig__590.48.01.txt"),
        ("H200", "linux-x86_64__nvidia-h200-mig__590.48.01.txt"),
    ):
        text = capture(filename)
        profiles = [
            p.split(".", 1)[1] if p[0].isdigit() and p[1] == "c" else p
            for p in re.findall(r"^\s+MIG (\S+)\s+Device\s+\d+:", text, re.M)
        ]
        totals = mib_field(query_sections(text)[0], "Shared FB Memory Usage", "Total")
        for profile, total in zip(profiles, totals, strict=True):
            assert gpu_type(key).mig_profiles[profile].memory_mib == total


def test_lost_card_answers_gpu_is_lost_to_every_call_including_handle_lookup():
    card = h100_card("h", 0)
    nvml = nvml_for(card)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    card.lost = True
    with pytest.raises(fake_nvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetHandleByIndex(0)
    for call in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUUID", "nvmlDeviceGetComputeMode"):
        with pytest.raises(fake_nvml.NVMLError_GpuIsLost):
            getattr(nvml, call)(handle)


def test_process_quirks_none_memory_raw_instance_ids_and_unnameable_pids():
    card = h100_card(
        "h",
        0,
        [
            FakeProcess(7, "python3", 5 * MIB, memory_visible=False),
            FakeProcess(8, "python3", 6 * MIB, name_error=fake_nvml.NVML_ERROR_NOT_FOUND),
            FakeProcess(9, "client", 7 * MIB, kind="mps"),
        ],
    )
    nvml = nvml_for(card)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    compute = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    assert [p.pid for p in compute] == [7, 8, 9]
    assert compute[0].usedGpuMemory is None and compute[1].usedGpuMemory == 6 * MIB
    # outside MIG NVML hands back the raw "not available" value, pynvml does not translate it
    assert compute[0].gpuInstanceId == 0xFFFFFFFF == compute[0].computeInstanceId
    assert [p.pid for p in nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)] == [9]
    with pytest.raises(fake_nvml.NVMLError_NotFound):
        nvml.nvmlSystemGetProcessName(8)
    with pytest.raises(fake_nvml.NVMLError_NotFound):
        nvml.nvmlSystemGetProcessName(4242)
    assert nvml.nvmlSystemGetProcessName(9) == "client"


def test_xid_events_are_queued_per_registered_card_and_wait_times_out_when_empty():
    state = FakeHostState([h100_card("h", 0), h100_card("h", 1)])
    nvml = FakeNvml(state)
    nvml.nvmlInit()
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(
        nvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError, event_set
    )
    state.post_xid(0, 13)  # card 0 not registered: not delivered
    state.post_xid(1, 79)
    data = nvml.nvmlEventSetWait_v2(event_set, 0)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    assert nvml.nvmlDeviceGetIndex(data.device) == 1
    with pytest.raises(fake_nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(event_set, 0)
    nvml.nvmlEventSetFree(event_set)
    assert state.event_sets == []


def test_non_mig_cards_answer_not_supported_for_mig_calls():
    nvml = nvml_for(build_card(gpu_type("L40S"), "h", 0))
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(fake_nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode(handle)
    h200 = nvml_for(build_card(gpu_type("H200"), "h", 0, H200_CAPTURED_LAYOUT))
    h200.nvmlInit()
    parent = h200.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(fake_nvml.NVMLError_InvalidArgument):
        h200.nvmlDeviceGetGpuInstanceId(parent)
    with pytest.raises(fake_nvml.NVMLError_NotFound):
        h200.nvmlDeviceGetMigDeviceHandleByIndex(parent, 6)  # slot 6 is empty


def test_process_lists_under_mps_match_the_h200_capture():
    """The fake lists the processes of an MPS card as an H200 on driver 580.159.04 did:
    the server and every client in the compute list, the clients again in the MPS list."""
    lines = (FIXTURES / "nvml-h200" / "mps-lists.txt").read_text().splitlines()
    role = {pid: kind for pid, _, kind in ast.literal_eval(lines[0].removeprefix("holders "))}
    listed = [line.split()[:3] for line in lines if line.startswith("nvmlDevice")]
    real = {(call, role.get(int(pid), "server"), int(mib)) for call, pid, mib in listed}
    card = build_card(gpu_type("H200"), "h", 0)
    card.processes = [
        FakeProcess(
            int(pid), "p", int(mib) * MIB, kind="mps" if role.get(int(pid)) == "mps" else "compute"
        )
        for call, pid, mib in listed
        if call == "nvmlDeviceGetComputeRunningProcesses"
    ]
    nvml = nvml_for(card)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    calls = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetMPSComputeRunningProcesses")
    fake = {
        (call, role.get(info.pid, "server"), info.usedGpuMemory // MIB)
        for call in calls
        for info in getattr(nvml, call)(handle)
    }
    assert fake == real
