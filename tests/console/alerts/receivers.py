"""A private Prometheus Alertmanager (Debian's prometheus-alertmanager) on a free port, and a
webhook receiver of the test's own that records what arrives."""

import json
import os
import shutil
import signal
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.processes import free_port, wait_for_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"


class Receiver:
    """Records every JSON body POSTed to it."""

    def __init__(self):
        self.bodies: list = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    receiving = Receiver()
    yield receiving
    receiving.close()


_CONFIG = """\
route:
  receiver: console-test
  group_by: ["Hostname"]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: console-test
    webhook_configs:
      - url: "{url}"
        send_resolved: true
"""


@pytest.fixture
def alertmanager(tmp_path, receiver):
    """(base URL, receiver): an Alertmanager grouping by Hostname, sending to `receiver`."""
    if not os.path.exists(ALERTMANAGER):
        pytest.skip(
            "prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)"
        )
    config = tmp_path / "alertmanager.yml"
    config.write_text(_CONFIG.format(url=receiver.url))
    port = free_port()
    log = tmp_path / "alertmanager.log"
    process = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
         "--log.level=warn"],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_port(port, "alertmanager", timeout=20)
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)


def firing_and_resolved(bodies: list) -> tuple[list, list]:
    """Alertmanager's webhook messages, split by their status."""
    firing = [b for b in bodies if b["status"] == "firing"]
    resolved = [b for b in bodies if b["status"] == "resolved"]
    return firing, resolved
