"""The host agent's Celery app. It loads no Django and opens no database connection.

    AGENT_SOURCE=nvml AGENT_HOST=gpu-07 celery -A inventory.agent.app worker \\
        -Q host.gpu-07 --pool threads -c 1
    AGENT_SOURCE=simulator celery -A inventory.agent.app worker -Q host.simulator ...

Beat (central) sends each host its collection plan to its queue when it changes, and slowly
again when it does not; the agent starts collecting a host on its first plan, keeps it, asks
for it again (signed) at start and when it heard nothing for the plan's `valid_for_s`, and
publishes batches to the `ingest` queue (inventory.agent.transport).
"""

import importlib
import logging
import os
import socket
from pathlib import Path

from celery import Celery
from celery.signals import worker_init, worker_shutdown

from inventory.agent.actions import ActionRunner, DoneRequests, read_actions
from inventory.agent.runtime import Agent, wall_clock
from inventory.agent.secrets import read_secrets
from inventory.agent.transport import batch_publisher, outcome_reporter, plan_requester
from inventory.env import env_bool, env_float, env_int, env_str
from inventory.wire.broker import broker_transport_options, broker_url

log = logging.getLogger(__name__)

app = Celery("agent")
# The broker's transport options (Redis visibility timeout, RabbitMQ publisher confirms, which
# also cover the batches this agent publishes) come from inventory.wire.broker, as for the console.
# Plans are acknowledged on receipt, not late: one lost with a killed agent is asked for again
# when it restarts, and a redelivered one would have expired (inventory.tasks).
app.conf.update(
    broker_url=broker_url(),
    broker_transport_options=broker_transport_options(),
    broker_connection_timeout=3,
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
)


def _simulated_fleet(name: str, day_shift_s: float):
    """The demo fleet (None: the simulator's default), or the operations demo's host, whose
    MPS server crashes at SIMULATOR_MPS_CRASH_AT (epoch seconds) when that is set."""
    if name == "demo":
        return None
    if name == "operations":
        from inventory.telemetry.simulator.operations_scenario import operations_host

        crash_at = env_str("SIMULATOR_MPS_CRASH_AT")
        if not crash_at:
            return [operations_host()]
        day_began = int(wall_clock() // 86400) * 86400 - day_shift_s % 86400
        return [operations_host(((1, float(crash_at) - day_began),))]
    raise ValueError(f"SIMULATOR_FLEET={name!r}: expected demo or operations")


def _serve_simulated_endpoints(simulator) -> None:
    """The simulated deployments' inference APIs, for the demo's combined load tests."""
    port = env_int("SIMULATOR_ENDPOINTS_PORT", 8765, minimum=0)
    if not port:
        return
    from inventory.telemetry.simulator.endpoints import EndpointServer, SimulatedBehaviour

    try:
        EndpointServer(SimulatedBehaviour(simulator.fleet.hosts), port=port).start_in_thread()
    except OSError as error:  # the port is taken: the demo runs on, without endpoints
        log.warning("simulated endpoints not served on port %s: %s", port, error)
    else:
        log.info("simulated inference endpoints on http://127.0.0.1:%s/<host>/<deployment>", port)


def _source_factory(secret_for):
    """The agent's source for a plan, and the hosts it asks for at start (it knows them)."""
    kind = env_str("AGENT_SOURCE", "nvml")
    if kind == "simulator":
        from inventory.agent.sources import FleetSimulator
        from inventory.telemetry.simulator.incidents import DEMO_INCIDENTS

        incidents = DEMO_INCIDENTS if env_bool("DEMO_INCIDENTS", False) else ()
        day_shift_s = env_float("SIMULATOR_DAY_SHIFT_S", 0.0)
        fleet = env_str("SIMULATOR_FLEET", "demo")
        specs = _simulated_fleet(fleet, day_shift_s)
        if fleet == "operations":
            from inventory.telemetry.simulator.operations_scenario import OPERATIONS_INCIDENTS

            incidents = OPERATIONS_INCIDENTS  # the scenario's own: card 0's stray job
        simulator = FleetSimulator(
            seed=env_int("SIMULATOR_SEED", 0),
            clock=wall_clock,
            incidents=incidents,
            specs=specs,
            day_shift_s=day_shift_s,
        )
        _serve_simulated_endpoints(simulator)
        # The hosts it simulates and holds a secret for (an unsigned request goes unanswered):
        # asked for at start, so that an agent started after the plans sent to the shared
        # queue expired collects at once rather than after beat's slow refresh.
        wanted = tuple(name for name in simulator.fleet.hosts if secret_for(name))
        return simulator.source_for, wanted
    if kind == "nvml":
        # AGENT_NVML_MODULE: another module with pynvml's API (an end-to-end test's fake NVML)
        pynvml = importlib.import_module(env_str("AGENT_NVML_MODULE", "pynvml"))

        from inventory.agent.sources import NvmlSource

        this_host = env_str("AGENT_HOST") or socket.gethostname()
        pods = None
        if env_bool("AGENT_POD_ATTRIBUTION"):
            from inventory.agent.kubernetes import NodePods

            pods = NodePods(this_host, clock=wall_clock)
        # Engines in containers leave their allocator figures here (docs/deploy.md); "off" for
        # none. A folder that is not there is a host where no engine does.
        allocator_dir = env_str("AGENT_ALLOCATOR_DIR", "/run/gpu-console/allocator")
        allocator_dir = None if allocator_dir == "off" else Path(allocator_dir)
        # The engines whose containerised deployments are named when they leave no snapshot.
        allocator_engines = tuple(
            name.strip()
            for name in env_str("AGENT_ALLOCATOR_ENGINES", "vllm").split(",")
            if name.strip() and name.strip() != "none"
        )

        def nvml_source(plan):
            if plan["host"] != this_host or plan.get("collector") != "nvml":
                return None
            return NvmlSource(
                pynvml,
                wall_clock,
                real_host_signals(pynvml),
                pods=pods,
                allocator_dir=allocator_dir,
                allocator_engines=allocator_engines,
            )

        # It knows its host: it asks for that plan at start, kept or not, rather than wait
        # for beat's refresh when the plan sent at registration expired unread.
        return nvml_source, (this_host,)
    raise ValueError(f"AGENT_SOURCE={kind!r}: expected nvml or simulator")


def real_host_signals(nvml):
    """Kernel-log Xids and the MPS daemon where this host has them (AGENT_KERNEL_LOG,
    AGENT_MPS: auto or off); exits, restarts and engine logs always."""
    from inventory.agent.kernel_log import KernelXidSource, NvmlPciMap, open_journal, open_kmsg
    from inventory.agent.mps import DEFAULT_PIPE_DIR, MpsMonitors
    from inventory.agent.signals import SignalOptions

    options = SignalOptions()
    if env_str("AGENT_KERNEL_LOG", "auto") != "off":
        options.kernel_log = KernelXidSource([open_kmsg, open_journal], NvmlPciMap(nvml))
    if env_str("AGENT_MPS", "auto") != "off":
        # One control daemon per GPU, as the runbooks set MPS up: each pipe directory named
        # here, and those of the daemons found running.
        configured = env_str("AGENT_MPS_PIPE_DIRS") or env_str("CUDA_MPS_PIPE_DIRECTORY")
        # AGENT_MPS_PIPE_GLOB: folders holding a daemon's `control` socket, each a daemon's
        # pipe directory, for an agent that cannot read the daemons' environment (a pod).
        globs = [pattern for pattern in env_str("AGENT_MPS_PIPE_GLOB").split(os.pathsep) if pattern]
        options.mps = MpsMonitors(
            (configured or DEFAULT_PIPE_DIR).split(os.pathsep),
            globs=globs,
            interval_s=env_float("AGENT_MPS_INTERVAL_S", 5.0, minimum=0.5),
        )
        options.mps.start()
    return options


secrets = read_secrets(env_str("AGENT_SECRET_FILE"))
state_dir = Path(env_str("AGENT_STATE_DIR") or "var/agent")
outcome_queue = env_str("AGENT_OUTCOME_QUEUE", "celery")
source_for, wanted = _source_factory(secrets)
agent = Agent(
    source_for,
    batch_publisher(app.connection_for_write, secrets),
    outbox_max=env_int("AGENT_OUTBOX_MAX", 360, minimum=1),
    # Where each host's outbox file lives, so batches waiting for the broker survive a restart.
    state_dir=state_dir,
    request_plan=plan_requester(app, secrets, outcome_queue),
    wanted=wanted,
)
# Host actions: only what AGENT_ACTIONS_FILE allows; each request id runs once (its outcome
# kept in the state folder), and every outcome goes back signed (inventory.agent.actions).
actions = ActionRunner(
    read_actions(env_str("AGENT_ACTIONS_FILE")),
    secrets,
    DoneRequests(state_dir / "actions-done.sqlite3"),
    outcome_reporter(app, secrets, outcome_queue),
    simulate=agent.simulator_of,
)


@app.task(name="agent.apply_plan", time_limit=30, soft_time_limit=25)
def apply_plan(plan: dict) -> None:
    if not agent.apply_plan(plan):
        log.warning("this agent cannot collect %s (collector %s)", plan["host"], plan["collector"])
    else:
        agent.heard_from_console(plan)


@app.task(name="agent.plan_still_valid", time_limit=30, soft_time_limit=25)
def plan_still_valid(host: str, digest: str) -> None:
    agent.plan_still_valid(host, digest)


# Acknowledged late: a request taken by an agent that dies is delivered again, and the done
# ids make sure that it still runs once.
@app.task(name="agent.run_action", acks_late=True, time_limit=3700, soft_time_limit=3690)
def run_action(body: str, signature: str | None) -> None:
    actions.handle(body, signature)


# worker_init comes before the worker reaches the broker: an agent restarted while the broker
# is away samples its hosts at once, from the plans it kept, instead of waiting for it.
@worker_init.connect
def _start(**kwargs) -> None:
    agent.start()


@worker_shutdown.connect
def _stop(**kwargs) -> None:
    agent.stop()
