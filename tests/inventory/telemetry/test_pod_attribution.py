"""GPU processes to pods and containers, from the cgroup paths kubelets really make."""

import pytest

from inventory.agent.runtime import HostRuntime
from inventory.agent.sources import FleetSimulator
from inventory.telemetry.pod_attribution import (
    CgroupOwner,
    Pod,
    attribute_pods,
    cgroup_path,
    owner_of_cgroup,
    read_owner,
    selector_matches,
    selector_problem,
)
from inventory.telemetry.process_mapping import map_processes
from inventory.telemetry.readings import CardReading, ProcessReading
from tests.inventory.test_agent import MIDNIGHT, Clock

UID = "8d4f2b1c-5a3e-4c1d-9f2a-7b6e5d4c3b2a"
CID = "3f1e9c0d2b4a68574f3e2d1c0b9a8f7e6d5c4b3a29181706f5e4d3c2b1a09f8e"


@pytest.mark.parametrize(
    ("proc_cgroup", "expected"),
    [
        # containerd, systemd driver, cgroup v2 (kubeadm, GKE, EKS on AL2023)
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
         f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
         CgroupOwner(UID, CID, "cri-containerd", "Burstable")),
        # Guaranteed pods have no QoS slice
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
         CgroupOwner(UID, CID, "cri-containerd", "Guaranteed")),
        # CRI-O (OpenShift), systemd driver
        (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
         f"{UID.replace('-', '_')}.slice/crio-{CID}.scope",
         CgroupOwner(UID, CID, "crio", "BestEffort")),
        # cri-dockerd, systemd driver, cgroup v1: one line per hierarchy
        ("12:pids:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
         f"{UID.replace('-', '_')}.slice/docker-{CID}.scope\n"
         "11:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
         f"{UID.replace('-', '_')}.slice/docker-{CID}.scope\n"
         "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
         f"{UID.replace('-', '_')}.slice/docker-{CID}.scope\n0::/\n",
         CgroupOwner(UID, CID, "docker", "Burstable")),
        # cgroupfs driver (k3s, older kubeadm), v1 and v2: the runtime is not named
        (f"11:memory:/kubepods/besteffort/pod{UID}/{CID}\n10:cpu,cpuacct:/kubepods/besteffort/"
         f"pod{UID}/{CID}\n", CgroupOwner(UID, CID, None, "BestEffort")),
        (f"0::/kubepods/pod{UID}/{CID}", CgroupOwner(UID, CID, None, "Guaranteed")),
        # kind and other kubelets in a kubelet.slice
        (f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
         f"kubelet-kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
         CgroupOwner(UID, CID, "cri-containerd", "BestEffort")),
        # CRI-O's conmon sits in the pod but in no container
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
         f"{UID.replace('-', '_')}.slice/crio-conmon-{CID}.scope",
         CgroupOwner(UID, None, None, "Burstable")),
        # Outside every pod: a host service, a login session, plain docker, a cgroup namespace
        ("0::/system.slice/nvidia-persistenced.service", None),
        ("0::/user.slice/user-1000.slice/session-3.scope", None),
        (f"0::/system.slice/docker-{CID}.scope", None),
        (f"12:memory:/docker/{CID}\n", None),
        ("0::/\n", None),
        # Look-alikes: a UID too short, a pod slice of something else
        ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice", None),
        (f"0::/system.slice/mypod{UID}.slice", None),
    ],
)  # fmt: skip
def test_cgroup_paths_name_the_pod_and_container(proc_cgroup, expected):
    path = cgroup_path(proc_cgroup)
    assert (owner_of_cgroup(path) if path is not None else None) == expected


def test_an_empty_or_unreadable_cgroup_names_nothing(tmp_path):
    assert cgroup_path("") is None
    assert read_owner(4242, proc=tmp_path) is None, "an exited process"
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    assert read_owner(77, proc=tmp_path) == CgroupOwner(UID, CID, None, "Burstable")


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({"app": "vllm", "model": "llama"}, {"app": "vllm", "model": "llama", "x": "1"}, True),
        ({"app": "vllm"}, {"app": "sglang"}, False),
        ({"matchLabels": {"app": "vllm"}}, {"app": "vllm"}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
         {"tier": "b"}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "canary", "operator": "Exists"}]}, {"canary": ""}, True),
        ({"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]},
         {"canary": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
         {"a": "2"}, False),
        ({}, {"app": "vllm"}, False),
        ({"matchLabels": {}}, {"app": "vllm"}, False),
    ],
)  # fmt: skip
def test_label_selectors_select_as_kubernetes_does_but_never_everything(selector, labels, matches):
    assert selector_matches(selector, labels) is matches


def _card(*pids: int) -> CardReading:
    processes = [ProcessReading(pid, "compute", "python3", None, 1 << 30, None, None, None)
                 for pid in pids]  # fmt: skip
    return CardReading(0, "GPU-0", "NVIDIA H200", processes=processes)


def test_a_deployment_named_by_pod_labels_gets_its_pods_gpu_processes():
    other_uid = "11111111-2222-3333-4444-555555555555"
    owners = {
        101: CgroupOwner(UID, CID, "cri-containerd", "Burstable"),
        102: CgroupOwner(other_uid, CID, "cri-containerd", "Burstable"),
        103: None,  # a process on the host, outside pods
        104: CgroupOwner("99999999-2222-3333-4444-555555555555", None, None, "Guaranteed"),
    }
    pods = {
        UID: Pod(UID, "serving", "llama-0", {"app": "vllm", "model": "llama"}),
        other_uid: Pod(other_uid, "staging", "llama-1", {"app": "vllm", "model": "llama"}),
    }
    plan = [
        {"deployment_id": "7", "device_uuids": ["GPU-0"], "pod_namespace": "serving",
         "pod_selector": {"model": "llama"}},
        {"deployment_id": "8", "device_uuids": ["GPU-0"], "pids": [103]},
    ]  # fmt: skip
    cards = [_card(101, 102, 103, 104)]
    entries = attribute_pods(plan, cards, pods, owners.get)
    assert entries[0]["pids"] == [101], "its namespace's pod only"
    assert entries[1] == plan[1]
    assert "pids" not in plan[0], "the plan itself is left as it was"
    mapping = map_processes(cards, entries)
    assert mapping.deployments[(0, 101)] == "7"
    assert mapping.deployments[(0, 103)] == "8"
    # Unknown pods fall to the other rules: here two candidates on the card, so ambiguous.
    assert set(mapping.ambiguous) == {(0, 102), (0, 104)}


def test_a_plan_without_pod_selectors_reads_no_cgroup():
    def never(pid):
        raise AssertionError("read a cgroup")

    plan = [{"deployment_id": "1", "device_uuids": ["GPU-0"]}]
    assert attribute_pods(plan, [_card(5)], {}, never) == plan


class _Directory:
    """A node's pods as NodePods answers them, for the simulated host's processes."""

    def __init__(self, pods: dict, owners: dict):
        self._pods, self.owner_of = pods, owners.get

    def __call__(self):
        return self._pods


def test_the_runtime_gives_a_pod_selected_deployment_its_pods_gpu_processes():
    clock = Clock(MIDNIGHT + 14 * 3600)
    simulator = FleetSimulator(seed=0, clock=clock)
    selector = {"matchLabels": {"app": "vllm", "model": "chat-large"}}
    plan = {"host": "infer-01", "collector": "nvml", "sample_interval_s": 1.0,
            "flush_interval_s": 10.0, "deployments": [
                {"deployment_id": "42", "device_uuids": [], "pod_namespace": "serving",
                 "pod_selector": selector}]}  # fmt: skip
    source = simulator.source_for({**plan, "collector": "simulated"})
    served = next(e for e in simulator.fleet.hosts["infer-01"].deployment_plan()
                  if e["deployment_id"] == "chat-large")  # fmt: skip
    owners = {pid: CgroupOwner(UID, CID, "cri-containerd", "Guaranteed") for pid in served["pids"]}
    source.pods = _Directory(
        {UID: Pod(UID, "serving", "chat-large-0", {"app": "vllm", "model": "chat-large"})},
        owners,
    )
    batches = []
    runtime = HostRuntime("infer-01", source, batches.append)
    runtime.apply_plan(plan)
    for _ in range(11):
        clock.t += 1
        runtime.tick()
        runtime.publish_pending()
    (batch,) = batches
    attributed = {row["pid"] for row in batch["processes"] if row["deployment_id"] == "42"}
    assert attributed == set(served["pids"])
    others = [row for row in batch["processes"] if row["pid"] not in attributed]
    assert others and all(row["deployment_id"] is None for row in others)


POD_LIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "48213"},
    "items": [
        {"metadata": {"name": "llama-0", "namespace": "serving", "uid": UID,
                      "labels": {"app": "vllm", "model": "llama"}},
         "spec": {"nodeName": "gpu-07"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "no-labels", "namespace": "default",
                      "uid": "11111111-2222-3333-4444-555555555555"},
         "spec": {"nodeName": "gpu-07"}},
    ],
}  # fmt: skip


def test_node_pods_asks_for_its_node_only_keeps_the_list_and_outlives_api_outages():
    from inventory.agent.kubernetes import NodePods

    now = {"t": 0.0}
    asked = []

    def get(path):
        asked.append(path)
        if len(asked) == 2:
            raise OSError("connection refused")
        return POD_LIST

    pods = NodePods("gpu-07", clock=lambda: now["t"], get=get, max_age_s=30)
    first = pods()
    assert asked == ["/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-07"]
    assert first[UID] == Pod(UID, "serving", "llama-0", {"app": "vllm", "model": "llama"})
    assert first["11111111-2222-3333-4444-555555555555"].labels == {}
    now["t"] = 10
    assert pods() is first and len(asked) == 1, "one list per max_age_s"
    now["t"] = 31
    assert pods() == first and len(asked) == 2, "the API server failed: the last list stands"
    now["t"] = 45
    assert len(pods()) == 2 and len(asked) == 2, "and is asked again only max_age_s later"


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ({"app": "vllm"}, None),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, None),
        (["app"], "not_an_object"),
        ({"matchLabels": {"app": 1}}, "labels_not_strings"),
        ({"matchLabels": {}, "match": {}}, "unknown_key"),
        ({"matchExpressions": {"key": "a"}}, "expressions_not_a_list"),
        ({"matchExpressions": [{"operator": "In"}]}, "expression_without_key"),
        ({"matchExpressions": [{"key": "a", "operator": "Gt"}]}, "unknown_operator"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
         "values_not_strings"),
    ],
)  # fmt: skip
def test_a_malformed_selector_is_named_and_selects_nothing(selector, problem):
    assert selector_problem(selector) == problem
    if problem:
        plan = [{"deployment_id": "1", "device_uuids": ["GPU-0"], "pod_selector": selector}]
        owners = {5: CgroupOwner(UID, CID, None, "Guaranteed")}
        pods = {UID: Pod(UID, "serving", "llama-0", {"app": "vllm", "a": "1"})}
        assert "pids" not in attribute_pods(plan, [_card(5)], pods, owners.get)[0]
