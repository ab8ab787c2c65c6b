"""The host actions this agent may run: only those its actions file names (AGENT_ACTIONS_FILE).

The console asks for a named action with typed parameters (inventory.telemetry.host_actions);
the file maps each deployment's actions to a systemd unit, a container or an argv template,
and the host's `mps_restart` to an argv. Commands run as argument lists, never through a
shell; a template's `{kv_bytes}`, `{mem_fraction}` and `{card_index}` are replaced by the
request's checked numbers, nothing else. Without the file every request is refused, saying so.

Each request runs at most once: its id is claimed in a SQLite file in the state folder before
it runs, so a redelivered request reports the outcome already recorded instead of running
again. A request past its `expires_at` is refused, and a command past its `timeout_s` killed.

    # /etc/gpu-console/actions.toml
    [deployments."llama-70b"]
    restart = { systemd = "vllm-llama70b.service" }
    reload_with = { argv = ["/opt/gpu-console-agent/bin/gpu-console-host-action",
                            "reload_with", "llama-70b", "--kv-bytes", "{kv_bytes}"] }
    [host]
    mps_restart = { argv = ["/opt/gpu-console-agent/bin/gpu-console-host-action",
                            "mps_restart", "--card", "{card_index}"], timeout_s = 60 }

(docs/operations.md has the whole format.) What needs root goes through the root helper
(inventory.agent.host_action_helper): the unprivileged agent cannot restart a unit itself.
`simulated = true` hands the action to the fleet simulator's model of the host instead of
running a command.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inventory.telemetry import host_actions as ha
from inventory.wire import signing

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 3600.0
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_CONTAINER_RUNTIMES = ("docker", "podman", "nerdctl")
# A command exiting EX_NOPERM (sysexits.h) refused the action itself, its reason on its last
# line: the root helper does (gpu-console-host-action), and any host script may.
REFUSED_EXIT = 77
# Shared with the root helper (inventory.agent.host_action_helper), which checks its own file.
SYSTEMD_UNIT = re.compile(r"[A-Za-z0-9@._:-]{1,200}\.(service|target)")
CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class ActionsFileError(ValueError):
    pass


@dataclass(frozen=True)
class Command:
    """How one action runs: an argv template, or the simulator's model of the host."""

    argv: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    simulated: bool = False

    def placeholders(self) -> set[str]:
        return {name for arg in self.argv for name in _PLACEHOLDER.findall(arg)}

    def render(self, params: dict[str, Any]) -> list[str]:
        """The argv with each placeholder replaced by the request's checked value."""
        missing = self.placeholders() - set(params)
        if missing:
            raise ha.RequestInvalid("invalid_params", f"the command needs {sorted(missing)}")
        return [_PLACEHOLDER.sub(lambda m: _format(params[m.group(1)]), arg) for arg in self.argv]


def _format(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(int(value))


@dataclass(frozen=True)
class ActionsTable:
    deployments: dict[str, dict[str, Command]]
    host: dict[str, Command]

    def command_for(self, request: ha.ActionRequest) -> Command:
        if request.action in ha.DEPLOYMENT_ACTIONS:
            actions = self.deployments.get(request.deployment or "")
            if actions is None:
                raise ha.RequestInvalid(
                    "not_allowed", f"the actions file names no deployment {request.deployment!r}"
                )
        else:
            actions = self.host
        command = actions.get(request.action)
        if command is None:
            raise ha.RequestInvalid(
                "not_allowed", f"the actions file does not allow {request.action} here"
            )
        offered = command.placeholders() & {"kv_bytes", "mem_fraction"}
        asked = set(request.params) & {"kv_bytes", "mem_fraction"}
        if request.action == ha.RELOAD_WITH and not command.simulated and asked - offered:
            raise ha.RequestInvalid(
                "invalid_params", f"this deployment reloads with {sorted(offered)} only"
            )
        return command


def parse_actions(text: str) -> ActionsTable:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ActionsFileError(f"not TOML: {error}") from None
    unknown = set(document) - {"deployments", "host"}
    if unknown:
        raise ActionsFileError(f"unknown section(s) {sorted(unknown)}: expected deployments, host")
    deployments = {}
    for name, actions in (document.get("deployments") or {}).items():
        if not ha.RUNTIME_NAME.fullmatch(name) or not isinstance(actions, dict):
            raise ActionsFileError(f"deployments.{name}: expected a table of actions")
        deployments[name] = {
            action: _command(f"deployments.{name}.{action}", action, spec)
            for action, spec in actions.items()
            if _known(f"deployments.{name}", action, ha.DEPLOYMENT_ACTIONS)
        }
    host = {
        action: _command(f"host.{action}", action, spec)
        for action, spec in (document.get("host") or {}).items()
        if _known("host", action, {ha.MPS_RESTART})
    }
    return ActionsTable(deployments, host)


def _known(where: str, action: str, allowed) -> bool:
    if action not in allowed:
        raise ActionsFileError(f"{where}: {action!r} is not one of {sorted(allowed)}")
    return True


def _command(where: str, action: str, spec: Any) -> Command:
    if not isinstance(spec, dict):
        raise ActionsFileError(f"{where}: expected a table")
    timeout = spec.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ActionsFileError(f"{where}.timeout_s: expected seconds")
    if not 1 <= timeout <= MAX_TIMEOUT_S:
        raise ActionsFileError(f"{where}.timeout_s: expected 1..{MAX_TIMEOUT_S:.0f}")
    kinds = {"argv", "systemd", "container", "simulated"} & set(spec)
    extra = set(spec) - {"argv", "systemd", "container", "runtime", "simulated", "timeout_s"}
    if len(kinds) != 1 or extra:
        raise ActionsFileError(
            f"{where}: expected exactly one of argv, systemd, container or simulated"
        )
    if spec.get("simulated") is True:
        return Command(simulated=True, timeout_s=float(timeout))
    if "argv" in spec:
        argv = spec["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ActionsFileError(f"{where}.argv: expected a list of strings")
        if not argv[0].startswith("/"):
            raise ActionsFileError(f"{where}.argv: the program must be an absolute path")
        command = Command(tuple(argv), float(timeout))
        unknown = command.placeholders() - set(ha.PARAMETERS)
        if unknown:
            raise ActionsFileError(f"{where}.argv: unknown placeholder(s) {sorted(unknown)}")
        if action == ha.RELOAD_WITH and not command.placeholders() & {"kv_bytes", "mem_fraction"}:
            raise ActionsFileError(
                f"{where}.argv: reload_with needs {{kv_bytes}} or {{mem_fraction}}"
            )
        return command
    if action in {ha.RELOAD_WITH, ha.MPS_RESTART}:
        raise ActionsFileError(f"{where}: {action} needs an argv (a reload takes parameters)")
    if "systemd" in spec:
        unit = spec["systemd"]
        if not isinstance(unit, str) or not SYSTEMD_UNIT.fullmatch(unit):
            raise ActionsFileError(f"{where}.systemd: expected a unit name such as vllm.service")
        return Command(("/usr/bin/systemctl", action, unit), float(timeout))
    name, runtime = spec["container"], spec.get("runtime", "docker")
    if not isinstance(name, str) or not CONTAINER_NAME.fullmatch(name):
        raise ActionsFileError(f"{where}.container: expected a container name")
    if runtime not in _CONTAINER_RUNTIMES:
        raise ActionsFileError(f"{where}.runtime: expected one of {_CONTAINER_RUNTIMES}")
    return Command((f"/usr/bin/{runtime}", action, name), float(timeout))


def read_actions(path: str) -> ActionsTable | None:
    """The allow-list, or None (every request refused) when AGENT_ACTIONS_FILE is not set."""
    if not path:
        log.warning("AGENT_ACTIONS_FILE is not set: this agent refuses every host action")
        return None
    return parse_actions(Path(path).read_text())


class DoneRequests:
    """The ids of the requests this agent took, with their outcomes: a request runs once."""

    def __init__(self, path: Path | None) -> None:
        # Opened on the first request: an agent that is never asked anything (`--once`, a
        # host without actions) leaves its state folder alone.
        self._path = path
        self._opened: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    @property
    def _db(self) -> sqlite3.Connection:
        if self._opened is None:
            if self._path is not None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            self._opened = sqlite3.connect(
                str(self._path) if self._path else ":memory:",
                isolation_level=None,
                check_same_thread=False,
            )
            self._opened.execute(
                "CREATE TABLE IF NOT EXISTS done (id TEXT PRIMARY KEY, outcome TEXT)"
            )
        return self._opened

    def claim(self, request_id: str) -> dict | None:
        """None if this request is new (and now claimed); else what it came to."""
        with self._lock:
            inserted = self._db.execute(
                "INSERT OR IGNORE INTO done (id, outcome) VALUES (?, NULL)", (request_id,)
            ).rowcount
            if inserted:
                return None
            row = self._db.execute(
                "SELECT outcome FROM done WHERE id = ?", (request_id,)
            ).fetchone()
        # Claimed by a run that died before its outcome: it may have half run, never again.
        return (
            json.loads(row[0])
            if row and row[0]
            else {"state": ha.FAILED, "reason_code": "interrupted"}
        )

    def finish(self, request_id: str, outcome: dict) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE done SET outcome = ? WHERE id = ?", (json.dumps(outcome), request_id)
            )


Simulate = Callable[[ha.ActionRequest], tuple[bool, str]]
Report = Callable[[dict], None]


class ActionRunner:
    """Checks a signed request, runs its command once, reports the outcome."""

    def __init__(
        self,
        table: ActionsTable | None,
        secret_for: Callable[[str], str | None],
        done: DoneRequests,
        report: Report,
        *,
        simulate: Callable[[str], Simulate | None] = lambda host: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.secret_for = secret_for
        self.done = done
        self.report = report
        self.simulate = simulate
        self.clock = clock

    def handle(self, body: str, signature: str | None) -> dict:
        outcome = self._outcome(body, signature)
        self.report(outcome)
        return outcome

    def _outcome(self, body: str, signature: str | None) -> dict:
        try:
            message = json.loads(body)
        except (TypeError, ValueError):
            message = None
        request = message if isinstance(message, dict) else {}
        secret = self.secret_for(str(request.get("host", "")))
        if not secret:
            return self._refuse(request, "no_secret", "this agent holds no secret for that host")
        if not signing.verify(secret, body.encode(), signature):
            return self._refuse(request, "bad_signature", "not signed with this host's secret")
        try:
            checked = ha.check_request(message)
        except ha.RequestInvalid as invalid:
            return self._refuse(request, invalid.code, invalid.detail)
        earlier = self.done.claim(checked.id)
        if earlier is not None:
            log.info("request %s was delivered again: not run a second time", checked.id)
            return {**earlier, "request_id": checked.id, "host": checked.host, "duplicate": True}
        outcome = self._run(request, checked)
        self.done.finish(checked.id, outcome)
        return outcome

    def _refuse(self, request: dict, code: str, detail: str) -> dict:
        log.warning("refused host action %s: %s", request.get("id"), detail)
        return ha.outcome_message(request, ha.REFUSED, reason_code=code, detail=detail)

    def _run(self, request: dict, checked: ha.ActionRequest) -> dict:
        now = self.clock()
        if now > checked.expires_at:
            return self._refuse(request, "expired", "the request expired before it arrived")
        if self.table is None:
            return self._refuse(
                request, "no_actions_file", "this agent has no actions file: it runs no action"
            )
        try:
            command = self.table.command_for(checked)
            if command.simulated:
                simulate = self.simulate(checked.host)
                if simulate is None:
                    raise ha.RequestInvalid("not_allowed", "this agent simulates no such host")
                ok, output = simulate(checked)
                state = ha.SUCCEEDED if ok else ha.FAILED
                return ha.outcome_message(
                    request, state, output=output, started_at=now, finished_at=self.clock()
                )
            argv = command.render(checked.params)
        except ha.RequestInvalid as invalid:
            return self._refuse(request, invalid.code, invalid.detail)
        log.info("running host action %s %s: %s", checked.id, checked.action, argv)
        try:
            done = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=command.timeout_s,
                check=False,
                text=True,
                errors="replace",
            )
        except subprocess.TimeoutExpired as expired:
            output = expired.output or ""
            output = output.decode(errors="replace") if isinstance(output, bytes) else output
            return ha.outcome_message(
                request,
                ha.TIMED_OUT,
                reason_code="timeout",
                detail=f"killed after {command.timeout_s:.0f} s",
                output=output,
                started_at=now,
                finished_at=self.clock(),
            )
        except OSError as error:
            return ha.outcome_message(
                request, ha.FAILED, reason_code="cannot_start", detail=str(error), started_at=now
            )
        if done.returncode == REFUSED_EXIT:
            lines = done.stdout.strip().splitlines()
            log.warning("host action %s refused on the host: %s", checked.id, done.stdout)
            return ha.outcome_message(
                request, ha.REFUSED, reason_code="host_refused",
                detail=lines[-1] if lines else "refused on the host", exit_code=done.returncode,
                output=done.stdout, started_at=now, finished_at=self.clock(),
            )  # fmt: skip
        return ha.outcome_message(
            request,
            ha.SUCCEEDED if done.returncode == 0 else ha.FAILED,
            reason_code="" if done.returncode == 0 else "exit_status",
            exit_code=done.returncode,
            output=done.stdout,
            started_at=now,
            finished_at=self.clock(),
        )
