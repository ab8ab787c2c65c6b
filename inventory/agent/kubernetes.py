"""The pods of this node, from the Kubernetes API server, for pod attribution.

The DaemonSet's service account (deploy/kubernetes/agent.yaml) may list pods; the agent asks
for those of its own node only (a field selector on spec.nodeName) and keeps the answer for
`max_age_s`, so a node's agent costs the API server one small list every half minute. While
the API server does not answer, the last list stands: a pod started since then stays
unattributed (its processes fall to the other mapping rules) until it answers again.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from inventory.telemetry.pod_attribution import CgroupOwner, Pod, pods_of_list, read_owner

log = logging.getLogger(__name__)

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster_get(path: str, timeout: float = 5.0) -> dict:
    """GET a path of the API server with the pod's service account, as client-go does."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    # Read each time: the kubelet rotates projected tokens.
    token = (SERVICE_ACCOUNT / "token").read_text().strip()
    request = urllib.request.Request(
        f"https://{host}:{port}{path}",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return json.load(response)


class NodePods:
    """This node's pods by UID (call it), and which pod a host PID runs in (`owner_of`)."""

    def __init__(
        self,
        node: str,
        *,
        clock: Callable[[], float],
        get: Callable[[str], dict] = in_cluster_get,
        max_age_s: float = 30.0,
        proc: Path = Path("/proc"),  # the host's: the DaemonSet runs with hostPID
    ) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={node}")
        self._path = f"/api/v1/pods?fieldSelector={selector}"
        self._clock = clock
        self._get = get
        self._max_age_s = max_age_s
        self._pods: dict[str, Pod] = {}
        self._fetched_at: float | None = None
        self._proc = proc

    def owner_of(self, pid: int) -> CgroupOwner | None:
        return read_owner(pid, self._proc)

    def __call__(self) -> dict[str, Pod]:
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < self._max_age_s:
            return self._pods
        self._fetched_at = now  # a failed list is retried after max_age_s, not every poll
        try:
            self._pods = pods_of_list(self._get(self._path))
        except (OSError, ValueError, KeyError) as error:
            log.warning("listing this node's pods failed (keeping the last list): %s", error)
        return self._pods
