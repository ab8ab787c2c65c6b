"""The privileged half of host actions: a root daemon that runs what its own allow-list maps an
action to, for the agent's user only; and the client the agent's actions file names.

The agent's unit has `NoNewPrivileges=yes` and no capability that could restart an engine, so
sudo and setuid programs cannot lift it: the privileged step is another process.
`gpu-console-host-action serve` runs as root under systemd, on the socket systemd opens for it
(deploy/systemd/gpu-console-host-actions.socket, 0660 for the agent's group). Each
connection's peer is checked with SO_PEERCRED against the helper's `allowed_users`; its one
request (an action, a deployment's runtime name or a card, typed parameters, exactly as
inventory.telemetry.host_actions checks them) must name what the helper's own root-owned file
(/etc/gpu-console/host-actions.toml) lists, and becomes fixed argument lists of absolute
programs, never a shell. Every request, run or refused, is logged with its peer.

    allowed_users = ["gpu-agent"]
    log_file = "/var/log/gpu-console-host-actions.log"    # JSON lines, besides the journal
    [deployments."llama-70b"]
    systemd = "vllm-llama70b.service"                    # or docker = "name",
    engine = "vllm"                                      # or kubernetes = "namespace/name"
    reload_env = "/etc/inference/llama-70b.env"
    [mps."0"]                                            # per card: its daemon
    pipe_directory = "/tmp/nvidia-mps-0"                 # or systemd = "nvidia-mps@0.service"

On a Kubernetes node (deploy/kubernetes/host-actions.yaml) `node_name_env = "NODE_NAME"` names
the variable holding the helper's node (the downward API's spec.nodeName): a pod's action runs
only when the deployment has a pod on that node (`kubectl get pods --field-selector
spec.nodeName=...`), or, for a start, when this helper stopped it (`stopped_file`); any other is
refused by name, in the log with its peer.

The client (`gpu-console-host-action restart llama-70b`, `... reload_with llama-70b
--kv-bytes N`, `... mps_restart --card 0`) prints the helper's output and exits with the
command's status; 77 (EX_NOPERM) when the helper refused, its reason on the last line, which
the agent reports as a refusal (inventory.agent.actions). docs/deploy.md, "Host actions".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pwd
import re
import socket
import struct
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from inventory.agent.actions import CONTAINER_NAME, REFUSED_EXIT, SYSTEMD_UNIT
from inventory.telemetry import host_actions as ha

log = logging.getLogger("gpu-console-host-action")

SOCKET = "/run/gpu-console-host-actions/socket"
CONFIG = "/etc/gpu-console/host-actions.toml"
TIMED_OUT_EXIT = 124  # as timeout(1)
DEFAULT_TIMEOUT_S = 300.0
MAX_REQUEST_BYTES = 64 * 1024
# The tools each kind of deployment is driven with; `[programs]` may move them (absolute).
PROGRAMS = {
    "systemctl": "/usr/bin/systemctl",
    "docker": "/usr/bin/docker",
    "kubectl": "/usr/bin/kubectl",
    "nvidia-cuda-mps-control": "/usr/bin/nvidia-cuda-mps-control",
}
# The engine flag a reload sets, per engine and parameter: the engine's start command reads
# it from $GPU_CONSOLE_ENGINE_ARGS (the reload_env file, or the pod's environment).
ENGINE_FLAGS = {
    ("vllm", "kv_bytes"): "--kv-cache-memory-bytes={}",
    ("vllm", "mem_fraction"): "--gpu-memory-utilization={}",
    ("sglang", "mem_fraction"): "--mem-fraction-static={}",
    ("tgi", "mem_fraction"): "--cuda-memory-fraction={}",
}
ENGINE_ARGS = "GPU_CONSOLE_ENGINE_ARGS"
# A daemon still exiting after `quit` makes `-d` fail: tried again for this long.
MPS_START_RETRY_S = 10.0


class ConfigError(ValueError):
    pass


class Refused(Exception):
    """A request the helper will not run; the message says why."""


@dataclass(frozen=True)
class Step:
    """One program run: a fixed argument list, its input, extra environment, and user."""

    argv: tuple[str, ...]
    stdin: str = ""
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    retry_s: float = 0.0
    may_fail: bool = False


@dataclass(frozen=True)
class NodeCheck:
    """Before a pod's action on a node-scoped helper: this node's pods of the namespace
    (`argv`, kubectl's JSON), of which one must be the deployment's (`pod_owner`)."""

    argv: tuple[str, ...]
    name: str  # the runtime name asked for
    pod_owner: str  # namespace/deployment
    action: str


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    # For a reload: the file written before the steps, and what it holds.
    write: tuple[Path, str] | None = None
    # On a node-scoped helper (Kubernetes), the check that comes before the steps.
    check: NodeCheck | None = None


@dataclass(frozen=True)
class Config:
    allowed_uids: frozenset[int]
    deployments: dict[str, dict[str, Any]]
    mps: dict[int, dict[str, Any]]
    programs: dict[str, str]
    timeout_s: float
    log_file: Path | None
    # Kubernetes: the node this helper runs on (`node_name_env`, the downward API's
    # spec.nodeName); it acts only on deployments with a pod there. None: not scoped.
    node: str | None = None
    # Deployments this helper stopped (scaled to 0: no pod left anywhere), which it may start
    # again; kept in this file across the helper's restarts (None: in memory).
    stopped_file: Path | None = None
    stopped: set[str] = field(default_factory=set)

    def program(self, name: str) -> str:
        return self.programs[name]


def _absolute(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/") or ".." in value.split("/"):
        raise ConfigError(f"{where}: expected an absolute path")
    return value


def _uid(name: Any) -> int:
    if isinstance(name, int) and not isinstance(name, bool):
        return name
    try:
        return pwd.getpwnam(str(name)).pw_uid
    except KeyError:
        raise ConfigError(f"allowed_users: no user {name!r} on this host") from None


def parse_config(text: str, environ: Mapping[str, str] = os.environ) -> Config:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"not TOML: {error}") from None
    known = {"allowed_users", "log_file", "timeout_s", "programs", "deployments", "mps",
             "node_name_env", "stopped_file"}  # fmt: skip
    if set(document) - known:
        raise ConfigError(f"unknown setting(s) {sorted(set(document) - known)}")
    users = document.get("allowed_users")
    if not isinstance(users, list) or not users:
        raise ConfigError("allowed_users: name the agent's user")
    programs = dict(PROGRAMS)
    for name, path in (document.get("programs") or {}).items():
        if name not in PROGRAMS:
            raise ConfigError(f"programs.{name}: not one of {sorted(PROGRAMS)}")
        programs[name] = _absolute(f"programs.{name}", path)
    timeout = document.get("timeout_s", DEFAULT_TIMEOUT_S)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 1 <= timeout <= 3600
    ):
        raise ConfigError("timeout_s: expected seconds")
    log_file = document.get("log_file")
    node = None
    if "node_name_env" in document:
        variable = document["node_name_env"]
        node = environ.get(variable) if isinstance(variable, str) else None
        if not node or not _NODE_NAME.fullmatch(node):
            # Unscoped, it would act for any node's agent: better not to start.
            raise ConfigError(f"node_name_env: ${variable} holds no node name: {node!r}")
    stopped_file = document.get("stopped_file")
    stopped_path = Path(_absolute("stopped_file", stopped_file)) if stopped_file else None
    return Config(
        allowed_uids=frozenset(_uid(user) for user in users),
        deployments={
            name: _deployment(name, spec)
            for name, spec in (document.get("deployments") or {}).items()
        },
        mps={_card(key): _mps(key, spec) for key, spec in (document.get("mps") or {}).items()},
        programs=programs,
        timeout_s=float(timeout),
        log_file=Path(_absolute("log_file", log_file)) if log_file else None,
        node=node,
        stopped_file=stopped_path,
        stopped=_read_stopped(stopped_path),
    )


_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _read_stopped(path: Path | None) -> set[str]:
    try:
        names = json.loads(path.read_text()) if path is not None else []
    except (OSError, ValueError):
        return set()
    return {name for name in names if isinstance(name, str)} if isinstance(names, list) else set()


def _deployment(name: str, spec: Any) -> dict[str, Any]:
    where = f"deployments.{name}"
    if not ha.RUNTIME_NAME.fullmatch(name) or not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a table named by a runtime name")
    kinds = {"systemd", "docker", "kubernetes"} & set(spec)
    extra = set(spec) - {"systemd", "docker", "kubernetes", "engine", "reload_env",
                         "kubeconfig", "replicas"}  # fmt: skip
    if len(kinds) != 1 or extra:
        raise ConfigError(f"{where}: expected exactly one of systemd, docker or kubernetes")
    (kind,) = kinds
    target = spec[kind]
    valid = {
        "systemd": SYSTEMD_UNIT.fullmatch,
        "docker": CONTAINER_NAME.fullmatch,
        "kubernetes": lambda t: (
            len(t.split("/")) == 2 and all(CONTAINER_NAME.fullmatch(part) for part in t.split("/"))
        ),
    }[kind]
    if not isinstance(target, str) or not valid(target):
        raise ConfigError(f"{where}.{kind}: not a valid {kind} name: {target!r}")
    engine = spec.get("engine")
    if engine is not None and engine not in {e for e, _ in ENGINE_FLAGS}:
        raise ConfigError(f"{where}.engine: expected one of {sorted({e for e, _ in ENGINE_FLAGS})}")
    if engine and kind != "kubernetes" and "reload_env" not in spec:
        raise ConfigError(f"{where}: a reload needs reload_env, the file its engine reads")
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 64:
        raise ConfigError(f"{where}.replicas: expected 1..64")
    return {
        "kind": kind,
        "target": target,
        "engine": engine,
        "reload_env": Path(_absolute(f"{where}.reload_env", spec["reload_env"]))
        if "reload_env" in spec
        else None,
        "kubeconfig": _absolute(f"{where}.kubeconfig", spec["kubeconfig"])
        if "kubeconfig" in spec
        else None,
        "replicas": replicas,
    }


def _card(key: str) -> int:
    if not key.isdigit() or not 0 <= int(key) <= ha.CARD_INDEX_MAX:
        raise ConfigError(f"mps.{key}: expected a card index 0..{ha.CARD_INDEX_MAX}")
    return int(key)


def _mps(key: str, spec: Any) -> dict[str, Any]:
    where = f"mps.{key}"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a table")
    if "systemd" in spec:
        if set(spec) != {"systemd"} or not SYSTEMD_UNIT.fullmatch(str(spec["systemd"])):
            raise ConfigError(f"{where}.systemd: expected only a unit name")
        return {"systemd": spec["systemd"]}
    extra = set(spec) - {"pipe_directory", "log_directory", "visible_devices", "user"}
    if extra or "pipe_directory" not in spec:
        raise ConfigError(f"{where}: expected pipe_directory (and log_directory, ...)")
    devices = str(spec.get("visible_devices", key))
    if not CONTAINER_NAME.fullmatch(devices.replace(",", "")):
        raise ConfigError(f"{where}.visible_devices: expected indices or GPU UUIDs")
    user = spec.get("user")
    if user is not None:
        _uid(user)
    return {
        "pipe_directory": _absolute(f"{where}.pipe_directory", spec["pipe_directory"]),
        "log_directory": _absolute(f"{where}.log_directory", spec["log_directory"])
        if "log_directory" in spec
        else None,
        "visible_devices": devices,
        "user": user,
    }


def plan(config: Config, request: Any) -> Plan:
    """The steps a request comes to, or Refused saying why it never runs."""
    if not isinstance(request, dict) or set(request) - {"action", "deployment", "params"}:
        raise Refused("a request is an object of action, deployment and params")
    action = request.get("action")
    if action not in ha.ACTIONS:
        raise Refused(f"unknown action {action!r}")
    try:
        params = ha.check_params(action, request.get("params", {}))
    except ha.RequestInvalid as invalid:
        raise Refused(invalid.detail) from None
    if action == ha.MPS_RESTART:
        if request.get("deployment") is not None:
            raise Refused("mps_restart is for a card, not a deployment")
        if not config.mps:
            # Kubernetes nodes: the device plugin owns the MPS daemon; docs/deploy.md.
            raise Refused("mps_restart is not offered by this helper: it lists no MPS daemon")
        return _mps_plan(config, params["card_index"])
    name = request.get("deployment")
    if not isinstance(name, str) or not ha.RUNTIME_NAME.fullmatch(name):
        raise Refused(f"{action} needs a deployment's runtime name")
    deployment = config.deployments.get(name)
    if deployment is None:
        raise Refused(f"this host's helper lists no deployment {name!r}")
    if action == ha.RELOAD_WITH:
        planned = _reload_plan(config, name, deployment, params)
    else:
        planned = Plan((_lifecycle(config, deployment, action),))
    if config.node is not None and deployment["kind"] == "kubernetes":
        *kubectl, _ = _kubectl(config, deployment)
        argv = (*kubectl, "get", "pods", "--field-selector", f"spec.nodeName={config.node}",
                "--output", "json")  # fmt: skip
        planned = replace(planned, check=NodeCheck(argv, name, deployment["target"], action))
    return planned


def check_node(config: Config, check: NodeCheck) -> dict[str, Any] | None:
    """None when the deployment has a pod on this helper's node (or, for a start, this helper
    stopped it); a failed answer when kubectl could not say; Refused otherwise."""
    namespace, owner = check.pod_owner.split("/")
    try:
        done = subprocess.run(
            check.argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
            capture_output=True, text=True, errors="replace",
            timeout=min(config.timeout_s, 60), check=False,
        )  # fmt: skip
        pods = json.loads(done.stdout)["items"] if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError) as error:
        done, pods = None, f"{type(error).__name__}: {error}"
    if not isinstance(pods, list):
        why = pods if isinstance(pods, str) else f"exited {done.returncode}: {done.stderr[-200:]}"
        reason = f"cannot list the pods of node {config.node} ({' '.join(check.argv)}): {why}"
        return _answer("failed", reason.strip(), 1, [])
    if any(_owned_by(pod, owner) for pod in pods):
        return None
    if check.action == ha.START and check.name in config.stopped:
        return None  # scaled to 0 here: no pod left anywhere to show it was this node's
    raise Refused(
        f"{check.name} ({namespace}/{owner}) has no pod on node {config.node}: this helper acts "
        "only on its own node's deployments"
    )


def _owned_by(pod: Any, deployment: str) -> bool:
    """A pod of the deployment: its ReplicaSet owner is `<deployment>-<pod-template-hash>`."""
    if not isinstance(pod, dict):
        return False
    metadata = pod.get("metadata") or {}
    template_hash = (metadata.get("labels") or {}).get("pod-template-hash")
    return bool(template_hash) and any(
        isinstance(ref, dict)
        and ref.get("kind") == "ReplicaSet"
        and ref.get("name") == f"{deployment}-{template_hash}"
        for ref in metadata.get("ownerReferences") or []
    )


def _note_stopped(config: Config, check: NodeCheck) -> None:
    """What this helper stopped it may start again, and only that."""
    if check.action == ha.STOP:
        config.stopped.add(check.name)
    elif check.action == ha.START:
        config.stopped.discard(check.name)
    else:
        return
    if config.stopped_file is not None:
        temporary = config.stopped_file.with_name(f".{config.stopped_file.name}.tmp")
        try:
            temporary.write_text(json.dumps(sorted(config.stopped)))
            os.replace(temporary, config.stopped_file)
        except OSError as error:  # the action ran: its answer still goes back
            log.warning("cannot keep %s: %s (kept in memory)", config.stopped_file, error)


def _kubectl(config: Config, deployment: dict) -> list[str]:
    namespace, name = deployment["target"].split("/")
    kubeconfig = ["--kubeconfig", deployment["kubeconfig"]] if deployment["kubeconfig"] else []
    return [config.program("kubectl"), *kubeconfig, "--namespace", namespace, name]


def _lifecycle(config: Config, deployment: dict, action: str) -> Step:
    kind, target = deployment["kind"], deployment["target"]
    if kind == "systemd":
        return Step((config.program("systemctl"), action, target))
    if kind == "docker":
        return Step((config.program("docker"), action, target))
    *kubectl, name = _kubectl(config, deployment)
    replicas = {ha.STOP: 0, ha.START: deployment["replicas"]}
    if action == ha.RESTART:
        return Step((*kubectl, "rollout", "restart", f"deployment/{name}"))
    return Step((*kubectl, "scale", f"deployment/{name}", f"--replicas={replicas[action]}"))


def _reload_plan(config: Config, name: str, deployment: dict, params: dict) -> Plan:
    (parameter, value), *_ = params.items()
    flag = ENGINE_FLAGS.get((deployment["engine"], parameter))
    if flag is None:
        raise Refused(f"{name} ({deployment['engine'] or 'no engine'}) does not reload {parameter}")
    setting = (
        f"{ENGINE_ARGS}={flag.format(f'{value:.4f}' if parameter == 'mem_fraction' else value)}"
    )
    if deployment["kind"] == "kubernetes":
        # Changing the pod template's environment rolls the deployment out: one command.
        *kubectl, pod_owner = _kubectl(config, deployment)
        return Plan((Step((*kubectl, "set", "env", f"deployment/{pod_owner}", setting)),))
    return Plan(
        (_lifecycle(config, deployment, ha.RESTART),),
        write=(deployment["reload_env"], setting + "\n"),
    )


def _mps_plan(config: Config, card: int) -> Plan:
    daemon = config.mps.get(card)
    if daemon is None:
        raise Refused(f"this host's helper lists no MPS daemon for card {card}")
    if "systemd" in daemon:
        return Plan((Step((config.program("systemctl"), "restart", daemon["systemd"])),))
    env = {"CUDA_MPS_PIPE_DIRECTORY": daemon["pipe_directory"]}
    if daemon["log_directory"]:
        env["CUDA_MPS_LOG_DIRECTORY"] = daemon["log_directory"]
    control = config.program("nvidia-cuda-mps-control")
    start_env = {**env, "CUDA_VISIBLE_DEVICES": daemon["visible_devices"]}
    return Plan(
        (
            # A daemon already gone (its `quit` fails) is started all the same.
            Step((control,), stdin="quit\n", env=env, may_fail=True),
            Step((control, "-d"), env=start_env, user=daemon["user"], retry_s=MPS_START_RETRY_S),
        )
    )


def run_plan(config: Config, plan_: Plan) -> dict[str, Any]:
    """Run the steps in order, stopping at the first that fails; the answer to the client."""
    if plan_.write is not None:
        path, text = plan_.write
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    output, deadline = [], time.monotonic() + config.timeout_s
    for step in plan_.steps:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", **step.env}
        retry_until = time.monotonic() + step.retry_s
        while True:
            try:
                done = subprocess.run(
                    step.argv, input=step.stdin, env=env, user=step.user,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    errors="replace", timeout=max(deadline - time.monotonic(), 1), check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                return _answer("timed_out", f"{step.argv[0]} ran past {config.timeout_s:.0f} s",
                               TIMED_OUT_EXIT, output)  # fmt: skip
            except OSError as error:
                return _answer("failed", f"cannot start {step.argv[0]}: {error}", 1, output)
            if done.returncode == 0 or time.monotonic() >= retry_until:
                break
            time.sleep(0.5)
        output.append(done.stdout)
        if done.returncode != 0 and not step.may_fail:
            return _answer("failed", f"{' '.join(step.argv)} exited {done.returncode}",
                           done.returncode, output)  # fmt: skip
    return _answer("succeeded", "", 0, output)


def _answer(state: str, reason: str, exit_code: int, output: list[str]) -> dict[str, Any]:
    return {"state": state, "reason": reason, "exit_code": exit_code, "output": "".join(output)}


def handle(config: Config, connection: socket.socket) -> dict[str, Any]:
    """One connection: its peer checked, its one request refused or run, the answer sent."""
    pid, uid, _ = struct.unpack("3i", connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))  # fmt: skip
    request: Any = None
    checked: list[str] | None = None
    failed: dict[str, Any] | None = None
    try:
        # Read first, whoever asks: an answer over unread data would reach the client as a reset.
        request = _read_request(connection)
        if uid not in config.allowed_uids:
            raise Refused(f"uid {uid} is not one of this helper's allowed_users")
        steps = plan(config, request)
        if steps.check is not None:
            checked = list(steps.check.argv)
            failed = check_node(config, steps.check)
        answer = failed or run_plan(config, steps)
        argv = [] if failed else [list(step.argv) for step in steps.steps]
        if steps.check is not None and answer["state"] == "succeeded":
            _note_stopped(config, steps.check)
    except Refused as refused:
        answer, argv = _answer("refused", str(refused), REFUSED_EXIT, []), []
    entry = {"peer_uid": uid, "peer_pid": pid, "request": request, "argv": argv,
             **{k: answer[k] for k in ("state", "reason", "exit_code")}}  # fmt: skip
    if checked is not None:
        entry["checked"] = checked  # the node's pods, listed before deciding
    _log(config, entry)
    connection.sendall(json.dumps(answer).encode() + b"\n")
    return answer


def _read_request(connection: socket.socket) -> Any:
    connection.settimeout(10)
    data = b""
    while b"\n" not in data and len(data) <= MAX_REQUEST_BYTES:
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
    try:
        return json.loads(data.split(b"\n")[0])
    except ValueError:
        raise Refused("the request is not one line of JSON") from None


def _log(config: Config, entry: dict[str, Any]) -> None:
    log.info("%s", json.dumps(entry))
    if config.log_file is not None:
        with config.log_file.open("a") as file:
            file.write(json.dumps({"at": time.time(), **entry}) + "\n")


def _listener(path: str) -> socket.socket:
    """systemd's socket (socket activation), else one bound here, open to any local user:
    who may ask is the peer check's to say."""
    if os.environ.get("LISTEN_PID") == str(os.getpid()) and os.environ.get("LISTEN_FDS") == "1":
        return socket.socket(fileno=3)
    Path(path).unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o666)
    listener.listen(16)
    return listener


def serve(config: Config, path: str) -> None:
    """One request at a time, in arrival order: never two actions on the host at once."""
    listener = _listener(path)
    log.info("serving host actions on %s for uids %s", path, sorted(config.allowed_uids))
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                handle(config, connection)
            except OSError as error:  # a client gone before its answer; the next one waits
                log.warning("a connection failed: %s", error)


def ask(path: str, request: dict[str, Any]) -> int:
    """The client: send the request, print the answer's output, exit with its status."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        try:
            connection.connect(path)
        except OSError as error:
            print(f"the host-action helper is not reachable at {path}: {error}", file=sys.stderr)
            return 1
        connection.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    answer = json.loads(data)
    sys.stdout.write(answer["output"])
    if answer["reason"]:
        print(f"{answer['state']}: {answer['reason']}")
    return int(answer["exit_code"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-console-host-action", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--socket", default=SOCKET)
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("serve", help="run the root helper (systemd starts it)")
    server.add_argument("--config", default=CONFIG)
    for action in (ha.RESTART, ha.STOP, ha.START):
        commands.add_parser(action).add_argument("deployment")
    reload_with = commands.add_parser(ha.RELOAD_WITH)
    reload_with.add_argument("deployment")
    value = reload_with.add_mutually_exclusive_group(required=True)
    value.add_argument("--kv-bytes", type=int)
    value.add_argument("--mem-fraction", type=float)
    commands.add_parser(ha.MPS_RESTART).add_argument("--card", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "serve":
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        serve(parse_config(Path(args.config).read_text()), args.socket)
        return 0
    if args.command == ha.MPS_RESTART:
        request = {"action": ha.MPS_RESTART, "params": {"card_index": args.card}}
    else:
        params = {}
        if args.command == ha.RELOAD_WITH:
            params = {"kv_bytes": args.kv_bytes} if args.kv_bytes is not None else {
                "mem_fraction": args.mem_fraction}  # fmt: skip
        request = {"action": args.command, "deployment": args.deployment, "params": params}
    return ask(args.socket, request)


if __name__ == "__main__":
    sys.exit(main())
