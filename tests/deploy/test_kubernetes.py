"""The Kubernetes manifests validate offline against the API's own schemas (strict: a
misspelt field fails), and the agent's DaemonSet keeps what the agent needs and no more."""

import io
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.core.exceptions import ValidationError
from dotenv import dotenv_values

from inventory.agent import host_action_helper as helper
from inventory.agent.actions import parse_actions
from inventory.collection import collection_plan
from inventory.telemetry import host_actions as ha
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
    for name in ("mps-pipes", "mps-pipe-folders", "engine-logs", "pod-logs", "secret", "config",
                 "allocator"):  # fmt: skip
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
    # MPS pipe directories by glob: the pod reads no daemon's environment; the glob's folder
    # is the node's, mounted where it is on the node (the directories' names stay the node's)
    parent = Path(settings["AGENT_MPS_PIPE_GLOB"]).parent
    assert volumes["mps-pipe-folders"]["hostPath"]["path"] == str(parent)
    assert mounts["mps-pipe-folders"]["mountPath"] == str(parent)
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


# What each kubectl command the helper runs sends to the API, for `deployment/NAME`, as read in
# kubectl v0.36.3 (kubernetes/kubectl 73fdc7a3; unchanged at dee3483a) and cli-runtime 69e8693b:
# the resource builder holds a name without its object and RetrieveLazy GETs it, once
# (cli-runtime pkg/resource/builder.go visitByName, Do; visitor.go Info.Get, RetrieveLazy);
# `scale` with no --current-replicas/--resource-version has a nil precondition, so
# pkg/scale/scale.go ScaleSimple sends one merge PATCH to deployments/NAME/scale, no GET of the
# scale (that GET+PUT is the precondition path, and a scale GET only follows with --timeout);
# `rollout restart` (the template's restartedAt annotation, pkg/cmd/rollout/rollout_restart.go)
# and `set env` (pkg/cmd/set/set_env.go) send a strategic merge PATCH to the deployment.
# The node check before each action, `get pods --field-selector spec.nodeName=N --output json`
# (pkg/cmd/get/get.go Run): a resource type and no name, so the builder's selector visitor LISTs
# the namespace's pods with that field selector (in chunks of --chunk-size, each a list; no
# table conversion for JSON output), and nothing else: a list, which resourceNames cannot narrow.
KUBECTL_REQUESTS = {
    ("rollout", "restart"): {("apps", "deployments", "get"), ("apps", "deployments", "patch")},
    ("scale",): {("apps", "deployments", "get"), ("apps", "deployments/scale", "patch")},
    ("set", "env"): {("apps", "deployments", "get"), ("apps", "deployments", "patch")},
    ("get", "pods"): {("", "pods", "list")},
}
NODE = "gpu-node-3"
SAMPLE_PARAMS = {"kv_bytes": 8 << 30, "mem_fraction": 0.85}


def _helper_config(documents) -> str:
    return documents[("ConfigMap", "gpu-console-host-actions")]["data"]["host-actions.toml"]


def _every_allowed_request(config):
    """Every request the helper's file allows, with sample parameters."""
    for name, deployment in config.deployments.items():
        for action in (ha.RESTART, ha.STOP, ha.START):
            yield {"action": action, "deployment": name}
        for engine, parameter in helper.ENGINE_FLAGS:
            if engine == deployment["engine"]:
                yield {"action": ha.RELOAD_WITH, "deployment": name,
                       "params": {parameter: SAMPLE_PARAMS[parameter]}}  # fmt: skip


def _api_requests(argv: list[str]) -> set[tuple]:
    """(namespace, group, resource, name, verb) that one kubectl argv of the helper sends."""
    namespace = argv[argv.index("--namespace") + 1]
    targets = [arg for arg in argv if arg.startswith("deployment/")]
    if not targets:  # the node's pods: a collection, no name
        after = argv[argv.index("--namespace") + 2 :]
        words = tuple(after[: next(i for i, a in enumerate(after) if a.startswith("--"))])
        assert argv[argv.index("--field-selector") + 1] == f"spec.nodeName={NODE}"
        return {(namespace, *request[:2], None, request[2]) for request in KUBECTL_REQUESTS[words]}
    (target,) = targets
    words = tuple(argv[argv.index("--namespace") + 2 : argv.index(target)])
    name = target.removeprefix("deployment/")
    return {(namespace, *request[:2], name, request[2]) for request in KUBECTL_REQUESTS[words]}


def test_the_host_action_helpers_rbac_is_exactly_what_its_allowed_commands_send():
    """The helper's Role grants each (namespace, resource, name, verb) some allowed kubectl
    command needs, and nothing else: no other verb, resource, deployment or namespace."""
    documents = {(d["kind"], d["metadata"]["name"]): d for d in _documents("host-actions.yaml")}
    config = helper.parse_config(_helper_config(documents), {"NODE_NAME": NODE})
    assert {d["kind"] for d in config.deployments.values()} == {"kubernetes"}
    assert config.mps == {}, "no MPS restart on Kubernetes nodes"
    assert config.node == NODE, "scoped to its own node"
    needed = set()
    for request in _every_allowed_request(config):
        planned = helper.plan(config, request)
        (step,) = planned.steps
        for argv in (planned.check.argv, step.argv):
            assert argv[0] == config.program("kubectl")
            needed |= _api_requests(list(argv))
    granted = {
        (role["metadata"]["namespace"], group, resource, name, verb)
        for (kind, _), role in documents.items()
        if kind == "Role"
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", [None])
        for verb in rule["verbs"]
    }
    assert granted == needed
    assert not [kind for kind, _ in documents if kind in ("ClusterRole", "ClusterRoleBinding")]
    # bound to the helper's own service account, which only the helper's pod runs as
    for (kind, _), binding in documents.items():
        if kind == "RoleBinding":
            assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": "gpu-console",
                                            "name": "gpu-console-host-actions"}]  # fmt: skip
            assert binding["roleRef"]["kind"] == "Role"
            assert ("Role", binding["roleRef"]["name"]) in documents
    pod = documents[("DaemonSet", "gpu-console-host-actions")]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpu-console-host-actions"
    assert not {"hostPID", "hostNetwork", "hostIPC", "runtimeClassName"} & set(pod)
    (container,) = pod["containers"]
    assert container["command"][:3] == ["python", "-m", "inventory.agent.host_action_helper"]
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    mounts_at = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert config.stopped_file.parent.as_posix() in mounts_at, "its record outlives the pod"
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # its kubeconfig (the pod's token) is in the ConfigMap it mounts
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    kubeconfigs = {Path(d["kubeconfig"]) for d in config.deployments.values()}
    assert kubeconfigs == {Path(mounts["config"]) / "kubeconfig"}
    assert "kubeconfig" in documents[("ConfigMap", "gpu-console-host-actions")]["data"]


def test_the_agent_asks_the_helper_over_the_nodes_socket_and_stays_read_only_and_unprivileged():
    """docs/deploy.md's table, row "host actions": the agent's pod gets an actions file whose
    every command is the helper's client, the node folder of the helper's socket (read-only),
    no capability, and no Kubernetes verb that changes anything."""
    agent = {(d["kind"], d["metadata"]["name"]): d for d in _documents("agent.yaml")}
    helper_documents = {
        (d["kind"], d["metadata"]["name"]): d for d in _documents("host-actions.yaml")
    }
    pod = agent[("DaemonSet", "gpu-console-agent")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}, "nothing added"
    assert security["allowPrivilegeEscalation"] is False
    assert "privileged" not in security
    assert pod["serviceAccountName"] == "gpu-console-agent"
    assert all(
        set(rule["verbs"]) <= {"get", "list", "watch"}
        for document in agent.values()
        if document["kind"] in ("ClusterRole", "Role")
        for rule in document["rules"]
    )
    assert "gpu-console-agent" not in yaml.safe_dump(
        [d for (kind, _), d in helper_documents.items() if kind == "RoleBinding"]
    ), "the helper's Role is bound to the helper alone"
    # the actions file: the agent's ConfigMap, named by AGENT_ACTIONS_FILE
    config_map = agent[("ConfigMap", "gpu-console-agent")]["data"]
    settings = dotenv_values(stream=io.StringIO(config_map["agent.env"]))
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    actions_file = Path(settings["AGENT_ACTIONS_FILE"])
    assert actions_file.parent == Path(mounts["config"]["mountPath"])
    table = parse_actions(config_map[actions_file.name])
    assert table.host == {}, "no mps_restart on Kubernetes nodes"
    helper_config = helper.parse_config(_helper_config(helper_documents), {"NODE_NAME": NODE})
    assert set(table.deployments) == set(helper_config.deployments)
    for name, commands in table.deployments.items():
        for action, command in commands.items():
            assert command.argv[:3] == ("/usr/local/bin/gpu-console-host-action", action, name)
    # the socket: the node folder both pods mount, where the helper's --socket is
    helper_pod = helper_documents[("DaemonSet", "gpu-console-host-actions")]["spec"]["template"]
    (helper_container,) = helper_pod["spec"]["containers"]
    socket = Path(helper_container["command"][helper_container["command"].index("--socket") + 1])
    assert socket == Path(helper.SOCKET), "the client's default"
    folders = {}
    for spec, c in ((pod, container), (helper_pod["spec"], helper_container)):
        volumes = {v["name"]: v for v in spec["volumes"]}
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == str(socket.parent)]
        folders[c["name"]] = (volumes[mount["name"]]["hostPath"]["path"], mount.get("readOnly"))
    assert folders == {"agent": (str(socket.parent), True), "helper": (str(socket.parent), None)}
