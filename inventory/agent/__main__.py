"""`python -m inventory.agent`: the host agent, as a service manager or a DaemonSet starts it.

Settings come, in this order of precedence, from the command line, the environment, and the
file `--config` (or AGENT_CONFIG_FILE) names: KEY=VALUE lines, the format of systemd's
EnvironmentFile= and of a Kubernetes ConfigMap mounted as a file. The host secret is never a
setting itself, only the file that holds it (AGENT_SECRET_FILE).

    python -m inventory.agent --config /etc/gpu-console/agent.env
    python -m inventory.agent --once     # one sampling interval, one publish, then exit
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

from dotenv import dotenv_values

# Each flag and the environment variable it sets; the agent's modules read the latter.
FLAGS = {
    "host": "AGENT_HOST",
    "source": "AGENT_SOURCE",
    "broker": "CELERY_BROKER_URL",
    "secret_file": "AGENT_SECRET_FILE",
    "state_dir": "AGENT_STATE_DIR",
}


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="python -m inventory.agent",
        description="The GPU host agent: samples NVML, scrapes the engines and publishes "
        "batches to the console's broker. It never opens a database connection.",
        epilog="Every flag also reads from its environment variable (in brackets), and from "
        "the --config file where the environment does not set it.",
    )
    cli.add_argument("--config", help="a KEY=VALUE file of settings [AGENT_CONFIG_FILE]")
    cli.add_argument("--host", help="this host's name in the console [AGENT_HOST; hostname]")
    cli.add_argument(
        "--source",
        choices=["nvml", "simulator"],
        help="nvml (this machine's GPUs) or simulator (the demo fleet) [AGENT_SOURCE; nvml]",
    )
    cli.add_argument("--broker", help="Redis or RabbitMQ URL [CELERY_BROKER_URL]")
    cli.add_argument("--secret-file", help="the host secret's file [AGENT_SECRET_FILE]")
    cli.add_argument("--state-dir", help="outbox and kept plans [AGENT_STATE_DIR; var/agent]")
    cli.add_argument("--queue", help="the plan queue [host.<host>; host.simulator]")
    cli.add_argument("--loglevel", default="info")
    cli.add_argument(
        "--once",
        action="store_true",
        help="sample one interval of --once-flush-s seconds, publish it, exit 0 once the "
        "broker has it (an install check; it keeps no plan)",
    )
    cli.add_argument("--once-flush-s", type=float, default=2.0)
    return cli


def configure(args: argparse.Namespace, environ: os._Environ | dict = os.environ) -> None:
    """Put the file's settings, then the flags', into the environment the agent reads."""
    config = args.config or environ.get("AGENT_CONFIG_FILE")
    if config:
        if not os.path.isfile(config):
            raise SystemExit(f"the agent's settings file {config} does not exist")
        for key, value in dotenv_values(config).items():
            if value is not None:
                environ.setdefault(key, value)
    for flag, variable in FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            environ[variable] = value


def queue_name(args: argparse.Namespace) -> str:
    if args.queue:
        return args.queue
    if os.environ.get("AGENT_SOURCE") == "simulator":
        return "host.simulator"
    return f"host.{os.environ.get('AGENT_HOST') or socket.gethostname()}"


def run_once(flush_s: float) -> int:
    """One interval of one host (AGENT_HOST), published; 0 once the broker has it."""
    from inventory.agent.app import agent
    from inventory.agent.runtime import HostRuntime

    source_kind = os.environ.get("AGENT_SOURCE", "nvml")
    plan = {
        "host": os.environ.get("AGENT_HOST") or socket.gethostname(),
        "collector": "simulated" if source_kind == "simulator" else "nvml",
        "sample_interval_s": min(1.0, flush_s / 2),
        "flush_interval_s": flush_s,
    }
    source = agent.source_for(plan)
    if source is None:
        print(f"this agent cannot collect {plan['host']} ({source_kind})", file=sys.stderr)
        return 2
    runtime = HostRuntime(plan["host"], source, agent.publish)
    runtime.apply_plan(plan)
    while not len(runtime.outbox):
        time.sleep(max(0.0, runtime.next_poll - source.now()))
        runtime.tick()
    if runtime.publish_pending() != 1:
        print(f"publishing failed: {runtime.outbox.last_error}", file=sys.stderr)
        return 1
    print(f"published one batch of {plan['host']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure(args)
    if args.once:
        return run_once(args.once_flush_s)
    from inventory.agent.app import app

    # No gossip, mingle or heartbeat events: a thousand agents would each hear every other.
    queue = queue_name(args)
    app.worker_main(
        ["worker", "-Q", queue, "--pool", "threads", "-c", "1", "-n", f"{queue}@%h",
         "-l", args.loglevel, "--without-gossip", "--without-mingle", "--without-heartbeat"]
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
