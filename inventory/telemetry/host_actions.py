"""Host actions: the named operations the console may ask a host for, and their parameters.

Shared by the console (which builds requests) and the agent (which checks them against its
actions file): a request names an action, the deployment it is for (its runtime name on the
host) or a card, and typed parameters; never a command line. Requests and outcomes travel as
JSON bodies signed with the host's secret (inventory.wire.signing), like batches.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

RESTART = "restart"
STOP = "stop"
START = "start"
RELOAD_WITH = "reload_with"
MPS_RESTART = "mps_restart"
ACTIONS = (RESTART, STOP, START, RELOAD_WITH, MPS_RESTART)
# Every action restarts or stops something that serves traffic: each needs an approved
# proposal or a standing policy an approver signed (console.operations.authority).
DISRUPTIVE = frozenset(ACTIONS)
DEPLOYMENT_ACTIONS = frozenset({RESTART, STOP, START, RELOAD_WITH})

# The typed parameters an actions file may substitute into its commands, with their bounds.
KV_BYTES_MAX = 2**50
MEM_FRACTION_RANGE = (0.05, 0.98)
CARD_INDEX_MAX = 63
PARAMETERS = ("kv_bytes", "mem_fraction", "card_index")
RUNTIME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}")

# Outcome states, and the reason codes of a refusal.
SUCCEEDED, FAILED, TIMED_OUT, REFUSED = "succeeded", "failed", "timed_out", "refused"
OUTCOME_STATES = (SUCCEEDED, FAILED, TIMED_OUT, REFUSED)
OUTPUT_TAIL_CHARS = 4000


class RequestInvalid(ValueError):
    """A request that can never run; `code` is the refusal reason code."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class ActionRequest:
    id: str
    host: str
    action: str
    deployment: str | None
    params: dict[str, Any]
    expires_at: float

    def as_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "action": self.action,
            "deployment": self.deployment,
            "params": dict(self.params),
            "expires_at": self.expires_at,
        }


def check_params(action: str, params: Any) -> dict[str, Any]:
    """The parameters, typed and in bounds, or RequestInvalid saying which is not."""
    if not isinstance(params, dict):
        raise RequestInvalid("invalid_params", "params must be an object")
    unknown = set(params) - set(PARAMETERS)
    if unknown:
        raise RequestInvalid("invalid_params", f"unknown parameter(s): {sorted(unknown)}")
    checked: dict[str, Any] = {}
    if "kv_bytes" in params:
        value = params["kv_bytes"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= KV_BYTES_MAX:
            raise RequestInvalid("invalid_params", f"kv_bytes must be an integer 1..{KV_BYTES_MAX}")
        checked["kv_bytes"] = value
    if "mem_fraction" in params:
        value = params["mem_fraction"]
        low, high = MEM_FRACTION_RANGE
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise RequestInvalid("invalid_params", f"mem_fraction must be within {low}..{high}")
        checked["mem_fraction"] = float(value)
    if "card_index" in params:
        value = params["card_index"]
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 <= value <= CARD_INDEX_MAX
        ):
            raise RequestInvalid("invalid_params", f"card_index must be 0..{CARD_INDEX_MAX}")
        checked["card_index"] = value
    if action == RELOAD_WITH and len({"kv_bytes", "mem_fraction"} & set(checked)) != 1:
        raise RequestInvalid("invalid_params", "reload_with takes kv_bytes or mem_fraction")
    if action == MPS_RESTART and "card_index" not in checked:
        raise RequestInvalid("invalid_params", "mps_restart takes card_index")
    if action in {RESTART, STOP, START} and checked:
        raise RequestInvalid("invalid_params", f"{action} takes no parameters")
    return checked


def check_request(message: Any) -> ActionRequest:
    """A request message as the agent receives it, checked whole."""
    if not isinstance(message, dict):
        raise RequestInvalid("invalid_request", "a request is a JSON object")
    try:
        request_id = str(uuid.UUID(str(message.get("id"))))
    except ValueError:
        raise RequestInvalid("invalid_request", "id must be a UUID") from None
    host, action = message.get("host"), message.get("action")
    if not isinstance(host, str) or not RUNTIME_NAME.fullmatch(host):
        raise RequestInvalid("invalid_request", "host must be a host name")
    if action not in ACTIONS:
        raise RequestInvalid("unknown_action", f"unknown action {action!r}")
    deployment = message.get("deployment")
    if action in DEPLOYMENT_ACTIONS:
        if not isinstance(deployment, str) or not RUNTIME_NAME.fullmatch(deployment):
            raise RequestInvalid("invalid_request", f"{action} needs a deployment's runtime name")
    elif deployment is not None:
        raise RequestInvalid("invalid_request", f"{action} is for a card, not a deployment")
    expires_at = message.get("expires_at")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int | float):
        raise RequestInvalid("invalid_request", "expires_at must be a time")
    params = check_params(action, message.get("params", {}))
    return ActionRequest(request_id, host, action, deployment, params, float(expires_at))


def outcome_message(
    request: dict[str, Any],
    state: str,
    *,
    reason_code: str = "",
    detail: str = "",
    exit_code: int | None = None,
    output: str = "",
    started_at: float | None = None,
    finished_at: float | None = None,
) -> dict[str, Any]:
    """What the agent reports back for a request (its id and host copied from it)."""
    return {
        "request_id": request.get("id"),
        "host": request.get("host"),
        "state": state,
        "reason_code": reason_code,
        "detail": detail[:500],
        "exit_code": exit_code,
        "output_tail": output[-OUTPUT_TAIL_CHARS:],
        "started_at": started_at,
        "finished_at": finished_at,
    }
