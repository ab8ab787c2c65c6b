"""The simulated deployments' inference endpoints follow the simulator's co-location model."""

import asyncio
import json

import pytest

from console.proposals.loadtest.execution import run_to_end
from inventory.analytics.stats import percentile
from inventory.telemetry.simulator.endpoints import EndpointServer, SimulatedBehaviour
from inventory.telemetry.simulator.host import SimulatedHost
from inventory.telemetry.simulator.scenarios import demo_fleet_specs

BUSY = 11 * 3600.0  # late morning: most of the day's traffic, short of the peak


def _host(name: str) -> SimulatedHost:
    host = SimulatedHost(next(s for s in demo_fleet_specs() if s.name == name), seed=0)
    host.advance_to(BUSY, max_step_s=60)
    return host


def _p99_ms(behaviour: SimulatedBehaviour, key: str) -> float:
    return percentile([behaviour.answer(key, {}).e2e_s for _ in range(4000)], 99) * 1000


def test_time_sliced_cards_raise_the_p99_over_the_slo_and_card_groups_do_not():
    shared, grouped = _host("infer-00"), _host("infer-01")
    for host, over in ((shared, True), (grouped, False)):
        behaviour = SimulatedBehaviour({host.name: host}, seed=1)
        for replica in host.replicas:
            slo_ms = replica.spec.workload.base_latency_s * 4000  # the demo's SLOs
            p99 = _p99_ms(behaviour, f"{host.name}/{replica.spec.deployment_id}")
            assert (p99 > slo_ms) is over, (host.name, replica.spec.deployment_id, p99)


def test_requests_in_flight_add_to_the_replicas_concurrency_and_its_kv_use():
    host = _host("infer-01")
    replica = host.replica("chat-large")
    behaviour = SimulatedBehaviour({host.name: host})
    host.advance_to(BUSY + 1)
    before = replica.kv_usage
    for _ in range(200):
        behaviour.started("infer-01/chat-large")
    host.advance_to(BUSY + 2)
    assert replica.kv_usage > before
    for _ in range(200):
        behaviour.finished("infer-01/chat-large")
    assert replica.extra_concurrency == 0


def test_a_restart_takes_the_replica_down_and_it_answers_503_until_it_is_back():
    host = _host("infer-01")
    behaviour = SimulatedBehaviour({host.name: host})

    async def ask():
        server = EndpointServer(behaviour)
        port = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def post(path: str, body: bytes = b"{}") -> int:
            writer.write(
                f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            status = int((await reader.readline()).split()[1])
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            return status

        statuses = [await post("/infer-01/chat-large/restart")]
        statuses.append(await post("/infer-01/chat-large/v1/completions", json.dumps({}).encode()))
        statuses.append(await post("/infer-01/nobody/v1/completions"))
        writer.close()
        await server.stop()
        return statuses

    assert run_to_end(ask()) == [200, 503, 404]
    host.advance_to(BUSY + 1)
    assert host.replica("chat-large").up


def test_a_port_already_taken_raises_the_binds_own_error_for_the_agent_to_carry_on():
    taken = EndpointServer(SimulatedBehaviour({}))
    port = taken.start_in_thread()
    # inventory.agent.app catches OSError and runs on without endpoints; anything else (a
    # RuntimeError after a 10 s wait, as before) stopped the agent from starting at all.
    with pytest.raises(OSError, match="address already in use"):
        EndpointServer(SimulatedBehaviour({}), port=port).start_in_thread()
