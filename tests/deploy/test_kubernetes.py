"""The Kubernetes manifests validate offline against the API's own schemas (strict: a
misspelt field fails), and the agent's DaemonSet keeps what the agent needs and no more."""

import io
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.core.exceptions import ValidationError
from dotenv import dotenv_values

from inventory.collection import collection_plan
from tests.factories import DeploymentFactory, GpuFactory

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES_VERSIONS = ("1.30", "1.37")


def _documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", sorted(path.name for path in MANIFESTS.glob("*.yaml")))
def test_every_manifest_is_valid_for_the_kubernetes_versions_we_support(name, version):
    for document in _documents(name):
        kubernetes_validate.validate(document, version, strict=True)


def test_strict_validation_would_catch_a_misspelt_field():
    (daemonset,) = [d for d in _documents("agent.yaml") if d["kind"] == "DaemonSet"]
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSIONS[-1], strict=True)


def test_the_agent_daemonset_runs_on_gpu_nodes_with_host_pids_and_read_only_host_folders():
    documents = {(d["kind"], d["metadata"]["name"]): d for d in _documents("agent.yaml")}
    pod = documents[("DaemonSet", "gpu-console-agent")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["hostPID"] is True
    (container,) = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "inventory.agent"]
    assert {"requests", "limits"} <= set(container["resources"])
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    for name in ("mps-pipes", "engine-logs", "pod-logs", "secret", "config", "allocator"):
        assert mounts[name].get("readOnly") is True, name
    assert volumes["mps-pipes"]["hostPath"]["path"] == "/tmp/nvidia-mps"
    # where the engines' pods leave their allocator snapshots, read where the agent looks
    assert volumes["allocator"]["hostPath"]["path"] == "/run/gpu-console/allocator"
    assert mounts["allocator"]["mountPath"] == "/run/gpu-console/allocator"
    assert not mounts["state"].get("readOnly"), "the outbox is written"
    assert "hostPath" in volumes["state"], "the outbox outlives the pod"
    assert volumes["secret"]["secret"]["secretName"] == "gpu-console-agent"
    env = {item["name"]: item for item in container["env"]}
    assert env["AGENT_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    secret_file = Path(env["AGENT_SECRET_FILE"]["value"])
    assert secret_file.parent == Path(mounts["secret"]["mountPath"])
    assert env["AGENT_STATE_DIR"]["value"] == mounts["state"]["mountPath"]
    # The ConfigMap is the agent's --config file, in the format it reads.
    config_map = documents[("ConfigMap", "gpu-console-agent")]
    config = Path(mounts["config"]["mountPath"]) / "agent.env"
    assert container["command"][-1] == str(config)
    settings = dotenv_values(stream=io.StringIO(config_map["data"]["agent.env"]))
    assert settings["AGENT_POD_ATTRIBUTION"] == "true"
    role = documents[("ClusterRole", "gpu-console-agent")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


@pytest.mark.django_db
def test_a_deployments_pod_selector_travels_in_its_hosts_plan_and_a_bad_one_is_refused():
    deployment = DeploymentFactory(pod_namespace="serving", pod_selector={"app": "vllm"})
    (entry,) = collection_plan(deployment.host)["deployments"]
    assert (entry["pod_namespace"], entry["pod_selector"]) == ("serving", {"app": "vllm"})
    deployment.pod_selector = {"matchExpressions": [{"key": "app", "operator": "Gt"}]}
    with pytest.raises(ValidationError) as refused:
        deployment.full_clean()
    assert refused.value.error_dict["pod_selector"][0].code == "unknown_operator"


def _deployment_form(deployment, **fields) -> dict:
    return {
        "served_model": deployment.served_model_id,
        "host": deployment.host_id,
        "gpus": [gpu.pk for gpu in deployment.gpus.all()],
        "isolation_mode": deployment.isolation_mode,
        "kv_reservation_bytes": deployment.kv_reservation_bytes,
        "kv_reservation_basis": deployment.kv_reservation_basis,
        "admission_policy": deployment.admission_policy,
        "status": deployment.status,
        **fields,
    }


@pytest.mark.django_db
def test_the_admin_sets_a_pod_selector_refuses_a_bad_one_and_clears_it(client):
    from django.contrib.auth import get_user_model

    from console.core.models import AuditEntry

    client.force_login(get_user_model().objects.create_superuser("root", "r@example.org", "x"))
    gpu = GpuFactory()
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    url = f"/admin/inventory/deployment/{deployment.pk}/change/"
    bad = '{"matchExpressions": [{"key": "app", "operator": "Gt"}]}'
    for value in (bad, '["app"]', "{not json"):
        refused = client.post(url, _deployment_form(deployment, pod_selector=value))
        assert refused.status_code == 200, value
        assert "errorlist" in refused.content.decode(), value
    assert not AuditEntry.objects.exists()
    saved = client.post(url, _deployment_form(
        deployment, pod_namespace="serving", pod_selector='{"app": "vllm-llama"}'))  # fmt: skip
    assert saved.status_code == 302
    deployment.refresh_from_db()
    assert (deployment.pod_namespace, deployment.pod_selector) == ("serving", {"app": "vllm-llama"})
    entry = AuditEntry.objects.get(action="deployment.change")
    assert set(entry.changed_fields) == {"pod_namespace", "pod_selector"}
    cleared = client.post(url, _deployment_form(deployment, pod_selector=""))
    assert cleared.status_code == 302
    deployment.refresh_from_db()
    assert deployment.pod_selector == {}


def test_the_daemonset_ships_no_host_action_the_agent_refuses_them_all():
    """docs/deploy.md's table, row "host actions": under the DaemonSet no root helper stands
    beside the agent, so it is given no actions file (every request refused as
    `no_actions_file`), no helper's socket, and no Kubernetes verb that changes anything."""
    documents = {(d["kind"], d["metadata"]["name"]): d for d in _documents("agent.yaml")}
    pod = documents[("DaemonSet", "gpu-console-agent")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    settings = dotenv_values(
        stream=io.StringIO(documents[("ConfigMap", "gpu-console-agent")]["data"]["agent.env"])
    )
    env = {item["name"] for item in container["env"]}
    assert "AGENT_ACTIONS_FILE" not in settings and "AGENT_ACTIONS_FILE" not in env
    assert "gpu-console-host-actions" not in yaml.safe_dump(pod)  # no helper, no socket
    assert all(
        set(rule["verbs"]) <= {"get", "list", "watch"}
        for document in documents.values()
        if document["kind"] in ("ClusterRole", "Role")
        for rule in document["rules"]
    )
