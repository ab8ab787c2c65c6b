"""The collector on the fake NVML: MIG, lost cards, odd processes, faults instead of crashes."""

from __future__ import annotations

import pytest

from inventory.telemetry import fake_nvml
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import MIB, build_card, gpu_type

from .conftest import h100_card, h200_mig_card


def collector_for(*cards, **kwargs) -> tuple[NvmlCollector, FakeHostState]:
    state = FakeHostState(list(cards))
    return NvmlCollector(FakeNvml(state), "test-host", clock=lambda: 1000.0, **kwargs), state


def test_h200_mig_host_reads_mig_devices_and_tolerates_unsupported_utilization():
    collector, _ = collector_for(h200_mig_card("mig", 0))
    poll = collector.poll()
    card = poll.cards[0]
    # As the shipped unit runs it, unprivileged: NVML keeps GPU instance handles to itself.
    (denied,) = poll.faults
    assert (denied.call, denied.error) == ("nvmlDeviceGetGpuInstanceById", "NVMLError_NoPermission")
    assert "privileged" in denied.message
    assert collector.poll().faults == []  # said once
    assert {(m.start_slot, m.size_slots) for m in card.mig_devices} == {(None, None)}
    assert card.mig_current == fake_nvml.NVML_DEVICE_MIG_ENABLE
    assert card.util_gpu is None and card.util_memory is None
    assert "nvmlDeviceGetUtilizationRates" in card.unsupported
    assert [m.profile for m in card.mig_devices] == [
        "1c.3g.71gb",
        "2c.3g.71gb",
        "2g.35gb",
        "1g.18gb",
        "1g.18gb",
    ]
    assert [(m.gpu_instance_id, m.compute_instance_id) for m in card.mig_devices] == [
        (2, 0),
        (2, 1),
        (3, 0),
        (9, 0),
        (10, 0),
    ]
    assert all(m.uuid.startswith("MIG-") for m in card.mig_devices)
    # the two compute instances of GPU instance 2 report the same (shared) memory
    assert card.mig_devices[0].used_bytes == card.mig_devices[1].used_bytes > 16_000 * MIB
    assert card.total_bytes == card.reserved_bytes + card.used_bytes + card.free_bytes
    ci1 = card.mig_devices[1].uuid
    assert {p.mig_device_uuid for p in card.processes} == {ci1}
    assert {(p.gpu_instance_id, p.compute_instance_id) for p in card.processes} == {(2, 1)}


def test_an_unprivileged_agent_sees_mig_processes_through_each_mig_devices_handle():
    collector, state = collector_for(h200_mig_card("mig", 0))
    nvml = FakeNvml(state)
    nvml.nvmlInit()
    parent = nvml.nvmlDeviceGetHandleByIndex(0)
    # On the parent card NVML lists MIG processes to privileged callers only.
    assert nvml.nvmlDeviceGetComputeRunningProcesses_v3(parent) == []
    poll = collector.poll()
    assert sorted(p.pid for p in poll.cards[0].processes) == [12249, 12250, 12267]
    state.privileged = True
    assert len(nvml.nvmlDeviceGetComputeRunningProcesses_v3(parent)) == 3
    again = NvmlCollector(FakeNvml(state), "test-host", clock=lambda: 1000.0).poll()
    # seen on the parent and on the instance's handle: one reading a process
    assert sorted(p.pid for p in again.cards[0].processes) == [12249, 12250, 12267]
    assert {p.mig_device_uuid for p in again.cards[0].processes} == {
        again.cards[0].mig_devices[1].uuid
    }


def test_a_privileged_agent_reads_where_each_gpu_instance_sits():
    collector, state = collector_for(h200_mig_card("mig", 0))
    state.privileged = True
    poll = collector.poll()
    assert poll.faults == []
    assert [(m.profile, m.start_slot, m.size_slots) for m in poll.cards[0].mig_devices] == [
        ("1c.3g.71gb", 4, 4),
        ("2c.3g.71gb", 4, 4),
        ("2g.35gb", 0, 2),
        ("1g.18gb", 2, 1),
        ("1g.18gb", 3, 1),
    ]


def test_a_lost_card_is_a_fault_and_the_other_cards_keep_reporting():
    cards = [
        h100_card("h", i, [FakeProcess(100 + i, "python3", (i + 1) * 1000 * MIB)]) for i in range(4)
    ]
    collector, state = collector_for(*cards)
    first = collector.poll()
    assert [c.lost for c in first.cards] == [False] * 4
    state.cards[2].lost = True
    poll = collector.poll()
    assert [c.lost for c in poll.cards] == [False, False, True, False]
    assert [c.used_bytes is not None for c in poll.cards] == [True, True, False, True]
    assert poll.cards[2].uuid == first.cards[2].uuid  # still attributed to the same card
    lost_faults = [f for f in poll.faults if f.error == "NVMLError_GpuIsLost"]
    assert len(lost_faults) == 1 and lost_faults[0].card_index == 2
    assert lost_faults[0].card_uuid == first.cards[2].uuid
    assert [p.pid for p in poll.cards[3].processes] == [103]
    # No Xid 79 came: the loss itself is the event, once while it lasts.
    assert [(e.kind, e.card_index, e.card_uuid) for e in poll.events] == [
        ("gpu_lost", 2, first.cards[2].uuid)
    ]
    assert collector.poll().events == []
    # back from a reset: discovered again, no fault
    state.cards[2].lost = False
    again = collector.poll()
    assert again.faults == [] and not again.cards[2].lost
    assert again.cards[2].processes[0].pid == 102
    state.cards[2].lost = True  # lost once more: said again
    assert [e.kind for e in collector.poll().events] == ["gpu_lost"]


def test_used_memory_none_stays_none_and_name_failures_are_faulted_once():
    card = h100_card(
        "h",
        0,
        [
            FakeProcess(7, "/usr/bin/python3", 5 * MIB, memory_visible=False),
            FakeProcess(8, "/usr/bin/python3", 6 * MIB, name_error=fake_nvml.NVML_ERROR_NOT_FOUND),
            FakeProcess(
                9, "/usr/bin/python3", 7 * MIB, name_error=fake_nvml.NVML_ERROR_NO_PERMISSION
            ),
        ],
    )
    collector, _ = collector_for(card)
    poll = collector.poll()
    by_pid = {p.pid: p for p in poll.cards[0].processes}
    assert by_pid[7].used_bytes is None and by_pid[7].name == "/usr/bin/python3"
    assert (by_pid[8].name, by_pid[8].name_error) == (None, "NVMLError_NotFound")
    assert (by_pid[9].name, by_pid[9].name_error) == (None, "NVMLError_NoPermission")
    assert by_pid[8].gpu_instance_id is None and by_pid[8].mig_device_uuid is None
    assert sorted(f.error for f in poll.faults) == ["NVMLError_NoPermission", "NVMLError_NotFound"]
    # the next poll says the same about the processes without repeating the faults
    second = collector.poll()
    assert second.faults == []
    assert {p.pid: p.name_error for p in second.cards[0].processes}[8] == "NVMLError_NotFound"


def test_mps_clients_are_tagged_mps_and_the_server_compute():
    card = h100_card(
        "h",
        0,
        [
            FakeProcess(50, "nvidia-cuda-mps-server", 34 * MIB),
            FakeProcess(51, "/usr/bin/python3", 900 * MIB, kind="mps"),
            FakeProcess(52, "/usr/bin/python3", 800 * MIB, kind="mps"),
        ],
    )
    card.compute_mode = fake_nvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    collector, _ = collector_for(card)
    reading = collector.poll().cards[0]
    # NVML lists each client in both lists; counted once, or the card's memory doubles.
    assert sorted((p.pid, p.kind, p.used_bytes) for p in reading.processes) == [
        (50, "compute", 34 * MIB),
        (51, "mps", 900 * MIB),
        (52, "mps", 800 * MIB),
    ]
    assert reading.compute_mode == fake_nvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


def test_every_nvml_failure_becomes_a_fault_never_an_exception():
    card = h100_card("h", 0, [FakeProcess(1, "p", MIB)])
    card.failing = {
        "nvmlDeviceGetMemoryInfo": fake_nvml.NVML_ERROR_NO_PERMISSION,
        "nvmlDeviceGetComputeRunningProcesses": fake_nvml.NVML_ERROR_UNKNOWN,
        "nvmlDeviceGetUtilizationRates": fake_nvml.NVML_ERROR_NOT_SUPPORTED,
    }
    collector, _ = collector_for(card, h100_card("h", 1))
    poll = collector.poll()
    faults = {(f.card_index, f.call, f.error) for f in poll.faults}
    assert faults == {
        (0, "nvmlDeviceGetMemoryInfo", "NVMLError_NoPermission"),
        (0, "nvmlDeviceGetComputeRunningProcesses", "NVMLError_Unknown"),
    }
    card0, card1 = poll.cards
    assert card0.used_bytes is None and card0.processes == []
    assert card0.compute_mode == fake_nvml.NVML_COMPUTEMODE_DEFAULT  # the rest still read
    assert card0.util_gpu is None and card0.unsupported == ("nvmlDeviceGetUtilizationRates",)
    assert card1.used_bytes is not None and card1.util_gpu is not None


def test_a_binding_that_raises_something_else_is_contained_to_its_card(monkeypatch):
    collector, _ = collector_for(h100_card("h", 0), h100_card("h", 1))
    nvml = collector._nvml
    real = nvml.nvmlDeviceGetComputeMode

    def broken(handle):
        if handle.card_index == 0:
            raise RuntimeError("ctypes went sideways")
        return real(handle)

    monkeypatch.setattr(nvml, "nvmlDeviceGetComputeMode", broken)
    poll = collector.poll()
    assert [(f.card_index, f.error) for f in poll.faults] == [(0, "RuntimeError")]
    assert poll.cards[1].compute_mode == fake_nvml.NVML_COMPUTEMODE_DEFAULT


def test_init_failure_and_driver_reload_are_faults():
    collector, state = collector_for(h100_card("h", 0))
    state.driver_loaded = False
    poll = collector.poll()
    assert poll.cards == [] and [f.error for f in poll.faults] == ["NVMLError_DriverNotLoaded"]
    state.driver_loaded = True
    poll = collector.poll()
    assert len(poll.cards) == 1 and poll.driver_version == "590.48.01"


def test_device_count_change_rediscovers_every_card():
    collector, state = collector_for(h100_card("h", 0))
    assert len(collector.poll().cards) == 1
    state.cards.append(build_card(gpu_type("H200"), "h", 1))
    poll = collector.poll()
    assert [c.name for c in poll.cards] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]


def test_xid_events_come_out_of_the_poll_with_the_card_they_hit():
    collector, state = collector_for(h100_card("h", 0), h100_card("h", 1))
    collector.poll()  # registers the cards
    state.post_xid(1, 79)
    state.cards[1].lost = True  # the card is gone by the time the event is read
    poll = collector.poll()
    assert [(e.kind, e.card_index, e.detail["xid"]) for e in poll.events] == [("xid", 1, 79)]
    assert poll.events[0].card_uuid == state.cards[1].uuid
    assert collector.poll().events == []


@pytest.mark.parametrize("refusal", ["events_supported", "failing"])
def test_a_card_that_refuses_xid_events_is_named_once_and_still_read(refusal):
    """The event set's Xids missing (a card without them, or a driver refusing the call) is a
    fault by name, NotSupported included: never silence."""
    collector, state = collector_for(h100_card("h", 0), h100_card("h", 1))
    if refusal == "events_supported":
        state.cards[1].events_supported = False
    else:
        state.cards[1].failing = {"nvmlDeviceRegisterEvents": fake_nvml.NVML_ERROR_NO_PERMISSION}
    poll = collector.poll()
    (fault,) = poll.faults
    assert (fault.card_index, fault.call) == (1, "nvmlDeviceRegisterEvents")
    expected = {"events_supported": "NVMLError_NotSupported", "failing": "NVMLError_NoPermission"}
    assert fault.error == expected[refusal]
    assert "only the kernel log's arrive" in fault.message
    assert [c.uuid for c in poll.cards] == [c.uuid for c in state.cards]
    assert collector.poll().faults == []  # said once, at discovery
    state.post_xid(0, 43)  # the other card's events still arrive
    assert [(e.card_index, e.detail["xid"]) for e in collector.poll().events] == [(0, 43)]


def test_mig_layout_change_is_picked_up():
    card = h200_mig_card("mig", 0)
    collector, _ = collector_for(card)
    assert len(collector.poll().cards[0].mig_devices) == 5
    del card.mig_devices[3:]  # the two 1g instances destroyed
    poll = collector.poll()
    assert len(poll.cards[0].mig_devices) in (3, 4)  # the poll that notices may be partial
    assert len(collector.poll().cards[0].mig_devices) == 3


@pytest.mark.parametrize("watch_xid", [True, False])
def test_close_shuts_nvml_down(watch_xid):
    collector, state = collector_for(h100_card("h", 0), watch_xid=watch_xid)
    collector.poll()
    collector.close()
    assert state.event_sets == []
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        collector._nvml.nvmlDeviceGetCount()


def test_driver_reload_under_the_collector_starts_over():
    collector, state = collector_for(h100_card("h", 0))
    collector.poll()
    collector._nvml._init_count = 0  # the library was unloaded and loaded again
    poll = collector.poll()
    assert poll.cards == [] and {f.error for f in poll.faults} == {"NVMLError_Uninitialized"}
    assert "nvmlDeviceGetCount" in {f.call for f in poll.faults}
    again = collector.poll()
    assert again.faults == [] and again.cards[0].uuid == state.cards[0].uuid
    state.post_xid(0, 43)  # the event set was made again on rediscovery
    assert [e.detail["xid"] for e in collector.poll().events] == [43]


def test_a_simulated_a100_80gb_partitions_into_its_mig_profiles():
    from inventory.telemetry.simulator.catalogue import MigSlice

    # A 3g.40gb split into two compute instances beside a 2g.20gb and a 1g.10gb.
    layout = (
        MigSlice("1c.3g.40gb", 1, 0),
        MigSlice("2c.3g.40gb", 1, 1),
        MigSlice("2g.20gb", 2),
        MigSlice("1g.10gb", 3),
    )
    collector, _ = collector_for(build_card(gpu_type("A100-80GB"), "a100", 0, layout))
    card = collector.poll().cards[0]
    assert card.mig_current == fake_nvml.NVML_DEVICE_MIG_ENABLE
    assert [m.profile for m in card.mig_devices] == [s.profile for s in layout]
    # Both compute instances of the 3g.40gb report its one 40,192 MiB (mig -lgip: 39.25 GiB).
    assert [m.total_bytes // MIB for m in card.mig_devices] == [40192, 40192, 19968, 9728]
