"""A MIG card as telemetry tells it: discovered with its instances from the first batch of an
NVML host (the fake NVML's H200 MIG capture through the collector and the sampler), re-read
when the layout changes, old slices closed and kept, processes on their MIG devices."""

import json
import time

import pytest

from console.core.auditing import Action
from console.core.auditing.models import AuditEntry
from console.placement.mig import canonical_profile_name, layout_errors, mig_card_type
from console.placement.problem import MigSlice as PlacedSlice
from inventory.ingest.writer import ingest_batch
from inventory.models import Gpu, Host, MigSlice, ProcessSample
from inventory.placement_state import current_placement
from inventory.reports.mig import gpu_instances
from inventory.telemetry import fake_nvml
from inventory.telemetry.collector import NvmlCollector
from inventory.telemetry.fake_nvml import FakeHostState, FakeMigDevice, FakeNvml
from inventory.telemetry.sampler import IntervalSampler
from inventory.wire.decoding import decode
from inventory.wire.schema import FieldsChecked
from tests.factories import HostFactory
from tests.inventory.telemetry.conftest import MIB, h200_mig_card

pytestmark = pytest.mark.django_db

HOST = "mig-host"


class _Agent:
    """The agent's collector and sampler over a fake H200 in MIG mode."""

    def __init__(self, privileged: bool = False) -> None:
        self.state = FakeHostState([h200_mig_card(HOST, 0)], privileged=privileged)
        self.clock = time.time() - 600
        self.collector = NvmlCollector(FakeNvml(self.state), HOST, clock=lambda: self.clock)
        self.sampler = IntervalSampler(HOST)

    @property
    def card(self):
        return self.state.cards[0]

    def batch(self) -> dict:
        for _ in range(3):
            self.sampler.add_poll(self.collector.poll())
            self.clock += 1.0
        return self.sampler.flush(self.clock)


@pytest.fixture
def host():
    return HostFactory(name=HOST, collector=Host.Collector.NVML)


def _layout(gpu):
    return [
        (s.profile_name, s.gpu_instance_id, s.compute_instance_id, s.start_slot, s.size_slots)
        for s in MigSlice.objects.filter(gpu=gpu).order_by("gpu_instance_id", "compute_instance_id")
    ]


def _valid(gpu) -> bool:
    card_type = mig_card_type(gpu.product_name, gpu.memory_total_bytes // MIB)
    pieces = [
        PlacedSlice(card_type.profile(instance.profile), instance.start_slot, None)
        for instance in gpu_instances(list(gpu.mig_slices.all()))
    ]
    return layout_errors(card_type, pieces) == []


def test_an_unprivileged_agents_first_batch_brings_the_card_with_its_instances(host):
    agent = _Agent()
    ingest_batch(agent.batch())
    gpu = Gpu.objects.get(host=host)
    assert gpu.mig_mode == Gpu.MigMode.ENABLED and gpu.mig_mode_pending == ""
    layout = _layout(gpu)
    assert [row[:3] for row in layout] == [
        ("1c.3g.71gb", 2, 0),
        ("2c.3g.71gb", 2, 1),
        ("2g.35gb", 3, 0),
        ("1g.18gb", 9, 0),
        ("1g.18gb", 10, 0),
    ]
    # The starts were inferred (NVML told the agent none): a valid placement, said so.
    assert all(s.start_inferred for s in gpu.mig_slices.all())
    assert _valid(gpu)
    assert layout[0][3:] == layout[1][3:]  # two compute instances of one GPU instance
    memory = {i.profile: i.memory_bytes for i in gpu_instances(list(gpu.mig_slices.all()))}
    assert memory["3g.71gb"] == 71424 * MIB and memory["1g.18gb"] == 16384 * MIB
    # The processes, seen through the MIG devices' handles, keep their device.
    ci1 = gpu.mig_slices.get(gpu_instance_id=2, compute_instance_id=1)
    samples = ProcessSample.objects.filter(gpu=gpu)
    assert samples.count() == 3 and {s.mig_slice_id for s in samples} == {ci1.pk}
    (change,) = AuditEntry.objects.filter(action=Action.MIG_LAYOUT)
    assert change.before["slices"] == [] and len(change.after["slices"]) == 5


def test_a_privileged_agent_tells_the_starts_and_they_are_kept_as_told(host):
    agent = _Agent(privileged=True)
    ingest_batch(agent.batch())
    gpu = Gpu.objects.get(host=host)
    assert [row[3:] for row in _layout(gpu)] == [(4, 4), (4, 4), (0, 2), (2, 1), (3, 1)]
    assert not any(s.start_inferred for s in gpu.mig_slices.all())


def test_the_same_layout_again_changes_nothing(host):
    agent = _Agent()
    ingest_batch(agent.batch())
    ids = set(MigSlice.history.values_list("pk", flat=True))
    ingest_batch(agent.batch())
    ingest_batch(agent.batch())
    assert set(MigSlice.history.values_list("pk", flat=True)) == ids
    assert AuditEntry.objects.filter(action=Action.MIG_LAYOUT).count() == 1


def test_a_repartition_closes_the_old_slices_keeps_the_rest_and_a_late_batch_changes_nothing(
    host,
):
    agent = _Agent()
    ingest_batch(agent.batch())
    gpu = Gpu.objects.get(host=host)
    kept = gpu.mig_slices.get(gpu_instance_id=3)
    # The two 1g instances destroyed, one 2g created in their place (GPU instance 5).
    late = agent.batch()
    card = agent.card
    card.processes = [p for p in card.processes if p.gpu_instance_id not in (9, 10)]
    card.mig_devices = [m for m in card.mig_devices if m.gpu_instance_id not in (9, 10)]
    card.mig_devices.append(
        FakeMigDevice(
            "MIG-5a0e5b1c-0000-4000-8000-000000000005",
            5,
            0,
            "2g.35gb",
            33280 * MIB,
            17 * MIB,
            start_slot=2,
            size_slots=2,
        )
    )
    agent.collector._cards[0].mig_devices = None  # the agent's next enumeration
    ingest_batch(agent.batch())
    gpu.refresh_from_db()
    assert [row[:3] for row in _layout(gpu)] == [
        ("1c.3g.71gb", 2, 0),
        ("2c.3g.71gb", 2, 1),
        ("2g.35gb", 3, 0),
        ("2g.35gb", 5, 0),
    ]
    assert _valid(gpu)
    assert gpu.mig_slices.get(gpu_instance_id=3).pk == kept.pk  # unchanged: the same row
    closed = MigSlice.history.filter(gpu=gpu, closed_at__isnull=False)
    assert sorted(s.gpu_instance_id for s in closed) == [9, 10]
    assert AuditEntry.objects.filter(action=Action.MIG_LAYOUT).count() == 2
    # The batch before the repartition, delivered late: it never puts the old layout back.
    ingest_batch(late)
    assert [row[1] for row in _layout(gpu)] == [2, 2, 3, 5]


def test_a_mode_change_pending_a_reset_is_kept_and_disabling_mig_closes_every_slice(host):
    agent = _Agent()
    ingest_batch(agent.batch())
    agent.card.mig_pending = fake_nvml.NVML_DEVICE_MIG_DISABLE
    ingest_batch(agent.batch())
    gpu = Gpu.objects.get(host=host)
    assert gpu.mig_mode == Gpu.MigMode.ENABLED
    assert gpu.mig_mode_pending == Gpu.MigMode.DISABLED
    assert gpu.mig_slices.count() == 5
    agent.card.mig_current = fake_nvml.NVML_DEVICE_MIG_DISABLE
    ingest_batch(agent.batch())
    gpu.refresh_from_db()
    assert (gpu.mig_mode, gpu.mig_mode_pending) == (Gpu.MigMode.DISABLED, "")
    assert gpu.mig_slices.count() == 0
    assert MigSlice.history.filter(gpu=gpu, closed_at__isnull=False).count() == 5


def test_slices_entered_by_hand_without_uuids_are_the_devices_telemetry_names(host):
    agent = _Agent(privileged=True)
    gpu = Gpu.objects.create(
        host=host,
        index=0,
        uuid=agent.card.uuid,
        product_name=agent.card.name,
        memory_total_bytes=agent.card.total_bytes,
        mig_mode=Gpu.MigMode.ENABLED,
    )
    by_hand = MigSlice.objects.create(
        gpu=gpu, profile_name="2g.35gb", start_slot=0, size_slots=2,
        memory_bytes=33280 * MIB, gpu_instance_id=3, compute_instance_id=0,
    )  # fmt: skip
    ingest_batch(agent.batch())
    by_hand.refresh_from_db()
    assert by_hand.closed_at is None and by_hand.uuid.startswith("MIG-")
    assert gpu.mig_slices.count() == 5


def test_placement_plans_the_discovered_instances_not_the_whole_card(host):
    agent = _Agent(privileged=True)
    ingest_batch(agent.batch())
    request, answer = current_placement(host)
    (card,) = request["gpus"]
    assert card["mig"] is True
    (placed,) = answer["cards"]
    # one entry a GPU instance, by its start
    assert [
        (canonical_profile_name(s["profile"]), s["start"], s["size_slots"])
        for s in placed["mig_slices"]
    ] == [("2g.35gb", 0, 2), ("1g.18gb", 2, 1), ("1g.18gb", 3, 1), ("3g.71gb", 4, 4)]


def test_the_ingest_workers_typed_decoder_keeps_what_a_mig_batch_says(host):
    agent = _Agent(privileged=True)
    batch = decode(json.dumps(agent.batch()).encode())
    assert isinstance(batch, FieldsChecked)  # the worker's fast path, not the whole check
    ingest_batch(batch)
    gpu = Gpu.objects.get(host=host)
    assert gpu.mig_mode == Gpu.MigMode.ENABLED
    assert [row[3:] for row in _layout(gpu)] == [(4, 4), (4, 4), (0, 2), (2, 1), (3, 1)]


def test_the_host_page_says_a_pending_mode_and_an_inferred_start(host, client_as):
    agent = _Agent()
    agent.card.mig_pending = fake_nvml.NVML_DEVICE_MIG_DISABLE
    ingest_batch(agent.batch())
    text = client_as("oncall").get(f"/hosts/{HOST}/").content.decode()
    assert "Disabled after a reset" in text
    assert text.count("(inferred)") == 4  # one a GPU instance
