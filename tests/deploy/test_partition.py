"""Three hosts on a real network, one of them cut off: its outbox backfills, nobody else notices.

Each simulated host's agent runs in a network namespace of its own, joined to the root
namespace by a veth pair, and publishes over TCP to a private redis-server there; an ingest
worker writes into the test database. One host's link goes down for PARTITION_CUT_S seconds
(20 here; docs/benchmarks.md has the figures of a 120 s run) and comes back.

    PARTITION_CUT_S=120 PARTITION_REPORT=partition.json pytest tests/deploy/test_partition.py
"""

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery
from django.db.models import Count
from kombu import Connection

from inventory.collection import collection_plan
from inventory.models import CardSample, CollectorStatus, IngestedBatch
from inventory.telemetry.simulator.scenarios import demo_fleet_specs
from inventory.wire.queue import INGEST_QUEUE
from tests.deploy.netns import REDIS, SimulatedMachine, namespaces_missing, start_redis
from tests.processes import (
    BASE_DIR,
    Processes,
    database_url_for_processes,
    demo_host_signed,
    simulator_secrets,
    wait_for,
)

CUT_S = float(os.environ.get("PARTITION_CUT_S", "20"))
REPORT = os.environ.get("PARTITION_REPORT")
HOSTS = ("infer-00", "a100-node", "mps-l40s")
CUT = "a100-node"
FLUSH_S = 2.0

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def machines():
    if reason := namespaces_missing():
        pytest.skip(f"no network namespaces here ({reason}); the partition test needs them")
    if REDIS is None:
        pytest.skip("redis-server is not installed")
    made = [SimulatedMachine(number) for number in range(1, len(HOSTS) + 1)]
    try:
        for machine in made:
            machine.create()
        yield dict(zip(HOSTS, made, strict=True))
    finally:
        for machine in made:
            machine.destroy()


@pytest.fixture
def network(machines, settings, tmp_path):
    """Redis on every root-side address, the ingest worker beside it, an agent per machine."""
    redis, port = start_redis([machine.gateway for machine in machines.values()], tmp_path)
    local_url = f"redis://127.0.0.1:{port}/0"
    processes = Processes(
        {"DATABASE_URL": database_url_for_processes(), "CELERY_BROKER_URL": local_url}, tmp_path
    )
    processes.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])
    agents = {}
    # Each host holds a secret and takes only batches signed with it: the agents get theirs.
    secrets = simulator_secrets(tmp_path, list(machines))["AGENT_SECRET_FILE"]
    for name, machine in machines.items():
        log = (tmp_path / f"agent-{name}.log").open("w")
        agents[name] = subprocess.Popen(
            ["ip", "netns", "exec", machine.namespace, sys.executable, "-m", "inventory.agent",
             "--source", "simulator", "--queue", f"host.{name}",
             "--broker", f"redis://{machine.gateway}:{port}/0",
             "--state-dir", str(tmp_path / f"state-{name}"), "--secret-file", secrets],
            cwd=BASE_DIR, env=processes.env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    settings.AGENT_FLUSH_INTERVAL_S = FLUSH_S
    sender = Celery("plans")
    hosts = {name: demo_host_signed(name) for name in HOSTS}
    # Through a connection of its own: Celery prefers CELERY_BROKER_URL (CI sets one) to a
    # broker it is given.
    with Connection(local_url) as connection:
        for name, host in hosts.items():
            # What beat sends, to each machine's own queue (beat sends all simulated hosts to
            # one).
            sender.send_task(
                "agent.apply_plan",
                args=[collection_plan(host)],
                queue=f"host.{name}",
                connection=connection,
            )

    def logs() -> str:
        names = ["ingest", *(f"agent-{name}" for name in HOSTS)]
        return "\n".join(
            f"--- {n} ---\n{(tmp_path / f'{n}.log').read_text(errors='replace')[-2500:]}"
            for n in names
        )

    yield hosts, agents, local_url, logs
    for agent in agents.values():
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    processes.stop()
    redis.terminate()
    redis.wait(10)


def _spec(name):
    return next(spec for spec in demo_fleet_specs() if spec.name == name)


def _seqs(host) -> list[int]:
    return list(IngestedBatch.objects.filter(host=host).values_list("seq", flat=True))


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def _board_says_stale(client, name: str) -> bool:
    html = client.get("/", {"partial": "1"}).content.decode()
    row = html.split(f'data-host="{name}"', 1)[1].split("</tr>", 1)[0]
    return "stale" in row


def test_a_host_cut_off_backfills_in_order_and_the_others_never_notice(
    network, machines, client_as, settings
):
    hosts, agents, local_url, logs = network
    settings.COLLECTOR_STALE_AFTER_S = max(4.0, CUT_S / 2)
    board = client_as("oncall")
    wait_for(
        lambda: all(len(_seqs(host)) >= 3 for host in hosts.values()),
        timeout=180,
        what="three batches of every host",
        logs=logs,
    )
    assert not _board_says_stale(board, CUT)
    cut_host = hosts[CUT]
    others = {name: host for name, host in hosts.items() if name != CUT}

    machines[CUT].link("down")
    cut_at, cut_wall = time.monotonic(), time.time()
    stale_seen = False
    others_depth = 0
    others_stale = False
    while time.monotonic() - cut_at < CUT_S:
        stale_seen = stale_seen or _board_says_stale(board, CUT)
        for name, host in others.items():
            others_stale = others_stale or _board_says_stale(board, name)
            status = CollectorStatus.objects.get(host=host)
            others_depth = max(others_depth, status.outbox_depth)
        time.sleep(0.5)
    stale_seen = stale_seen or _board_says_stale(board, CUT)
    written_during_cut = len(_seqs(cut_host))
    machines[CUT].link("up")
    restored_at = time.monotonic()
    restored_wall = time.time()

    def caught_up() -> bool:
        status = CollectorStatus.objects.get(host=cut_host)
        return status.last_sample_at.timestamp() >= restored_wall and len(_seqs(cut_host)) == (
            status.last_seq
        )

    wait_for(caught_up, timeout=CUT_S + 120, what=f"{CUT}'s backfill", logs=logs)
    catch_up_s = time.monotonic() - restored_at
    wait_for(lambda: not _board_says_stale(board, CUT), timeout=30, what=f"{CUT} live again")

    # A clean stop flushes the last interval: afterwards nothing may wait anywhere.
    for agent in agents.values():
        os.killpg(agent.pid, signal.SIGTERM)
    for agent in agents.values():
        agent.wait(30)
    with Connection(local_url) as conn:
        client = conn.default_channel.client
        # Drained and nothing unacknowledged: the worker acknowledges a group once it commits.
        wait_for(
            lambda: client.llen(INGEST_QUEUE.name) == 0 and client.hlen("unacked") == 0,
            timeout=30,
            what="the ingest queue drained and its last group committed",
        )

    figures = {}
    for name, host in hosts.items():
        status = CollectorStatus.objects.get(host=host)
        seqs = _seqs(host)
        doubled_rows = sum(
            row["n"] - 1
            for row in CardSample.objects.filter(gpu__host=host)
            .values("gpu", "ts")
            .annotate(n=Count("*"))
            .filter(n__gt=1)
        )
        figures[name] = {
            "expected": status.last_seq,
            "written": len(set(seqs)),
            "lost": status.last_seq - len(set(seqs)),
            "doubled": len(seqs) - len(set(seqs)) + doubled_rows,
            "out_of_order_gaps": status.missing_batches,
        }
        assert sorted(seqs) == list(range(1, status.last_seq + 1)), f"{name}: lost a batch"
        assert status.missing_batches == 0, f"{name}: a batch came after a later one"
        assert figures[name]["doubled"] == 0, f"{name}: a batch written twice"
    assert stale_seen, f"the board never showed {CUT} stale while it was cut off"
    assert not others_stale, "a host that was never cut off showed stale"
    # One batch may wait for the publisher's next turn (every 0.5 s) on a busy machine.
    assert others_depth <= 2, "the other hosts' outboxes filled while one link was down"
    backlog = IngestedBatch.objects.filter(
        host=cut_host, interval_end__gt=_at(cut_wall), interval_end__lte=_at(restored_wall)
    ).count()
    assert backlog >= CUT_S / FLUSH_S / 2, "the cut host's agent sampled on through the cut"
    assert written_during_cut + backlog <= figures[CUT]["expected"]

    report = {
        "cut_s": CUT_S,
        "flush_interval_s": FLUSH_S,
        "cut_host": CUT,
        "batches_made_during_cut": backlog,
        "catch_up_s": round(catch_up_s, 1),
        "hosts": figures,
    }
    print(json.dumps(report, indent=2))
    if REPORT:
        Path(REPORT).write_text(json.dumps(report, indent=2) + "\n")
