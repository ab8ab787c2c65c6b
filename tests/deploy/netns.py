"""Network namespaces that stand in for other machines: each joined to the root namespace by
a veth pair, its own addresses, a link that a test can cut."""

import os
import shutil
import subprocess
from pathlib import Path

from kombu import Connection

from tests.processes import free_port, wait_for

REDIS = shutil.which("redis-server")


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


def namespaces_missing() -> str | None:
    """Why this machine cannot make network namespaces, or None where it can."""
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"gcc-probe-{os.getpid()}"
    made = _ip("netns", "add", probe)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


class SimulatedMachine:
    """A network namespace with one veth pair to the root namespace: another machine, for TCP."""

    def __init__(self, number: int):
        tag = f"{os.getpid() % 10000}{number}"
        self.namespace = f"gcc-host-{tag}"
        self.root_link = f"gcr{tag}"  # interface names have at most 15 characters
        self.address = f"10.231.{number}.2"
        self.gateway = f"10.231.{number}.1"  # the root namespace's end, where redis listens

    def create(self) -> None:
        steps = [
            ("netns", "add", self.namespace),
            ("link", "add", self.root_link, "type", "veth", "peer", "name", "eth0",
             "netns", self.namespace),
            ("addr", "add", f"{self.gateway}/30", "dev", self.root_link),
            ("link", "set", self.root_link, "up"),
            ("-n", self.namespace, "addr", "add", f"{self.address}/30", "dev", "eth0"),
            ("-n", self.namespace, "link", "set", "eth0", "up"),
            ("-n", self.namespace, "link", "set", "lo", "up"),
        ]  # fmt: skip
        for step in steps:
            result = _ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"

    def link(self, state: str) -> None:
        result = _ip("link", "set", self.root_link, state)
        assert result.returncode == 0, result.stderr

    def destroy(self) -> None:
        _ip("link", "del", self.root_link)
        _ip("netns", "del", self.namespace)


def start_redis(gateways: list[str], log_dir: Path) -> tuple[subprocess.Popen, int]:
    """A private redis-server on loopback and on the root namespace's end of each veth pair."""
    port = free_port()
    redis = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", *gateways, "--protected-mode", "no",
         "--save", "", "--appendonly", "no"],
        stdout=(log_dir / "redis.log").open("w"),
    )  # fmt: skip
    wait_for(lambda: _redis_answers(f"redis://127.0.0.1:{port}/0"), timeout=10, what="redis")
    return redis, port


def _redis_answers(url: str) -> bool:
    try:
        with Connection(url, connect_timeout=0.5) as conn:
            conn.ensure_connection(max_retries=1)
        return True
    except Exception:
        return False
