"""The host actions on the fleet simulator's model of a host: what `simulated = true` runs."""

from __future__ import annotations

from inventory.telemetry import host_actions as ha
from inventory.telemetry.simulator.host import SimulatedHost


def run_simulated(host: SimulatedHost, request: ha.ActionRequest) -> tuple[bool, str]:
    """(succeeded, output), as a command's exit status and output would say."""
    try:
        if request.action == ha.MPS_RESTART:
            clients = host.restart_mps_server(request.params["card_index"])
            return True, f"mps server restarted on card {request.params['card_index']}; " + (
                f"clients to return: {', '.join(clients)}" if clients else "no clients"
            )
        deployment = request.deployment or ""
        if request.action == ha.RESTART:
            host.restart_deployment(deployment)
        elif request.action == ha.STOP:
            host.stop_deployment(deployment)
        elif request.action == ha.START:
            host.start_deployment(deployment)
        elif request.action == ha.RELOAD_WITH:
            kv = request.params.get("kv_bytes")
            if kv is None:
                kv = host.kv_bytes_for_fraction(deployment, request.params["mem_fraction"])
            host.restart_deployment(deployment, kv_reservation_bytes=kv)
            return True, f"{deployment} reloading with a KV reservation of {kv} bytes"
    except KeyError as missing:
        return False, f"no such deployment or card on {host.name}: {missing}"
    return True, f"{deployment}: {request.action} done"
