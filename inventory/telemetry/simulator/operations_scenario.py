"""The host the operations demo and its end-to-end tests run on: 3 x A100 in trouble.

- card 0: a priority-1 chat model and a priority-3 batch model, both vLLM, whose preallocated
  pools fill 98% of the card (no alarm by itself), and from 20 s a job no deployment owns that
  wants 4 GiB and takes up to 98% of what they leave (OPERATIONS_INCIDENTS): the on-demand
  part past the 95% limit, the degradation case (shrinking the batch model's KV by 6 GiB gives
  that part room again);
- card 1: two small models sharing the card through MPS, whose server stays down after a
  crash until someone restarts it (`mps_recovery="manual"`);
- card 2: one model whose allocator fragments over the day: the off-peak reload case.

Restarts take seconds here, not minutes, so that a test can watch them.
"""

from __future__ import annotations

from inventory.telemetry.simulator.host import CardSpec, DeploymentSpec, HostSpec
from inventory.telemetry.simulator.incidents import Incident
from inventory.telemetry.simulator.scenarios import _LLAMA_8B, _LLAMA_70B, GIB, MIB
from inventory.telemetry.simulator.workload import Traffic, Workload

HOST = "ops-a100"
RESTART_S = 5.0
# The stray job on card 0 starts once the tenants are up and stays (a day is the run's end):
# it wants 4 GiB and takes up to 98% of what is free beside it, growing into what is freed.
OPERATIONS_INCIDENTS = (
    Incident("memory_surge", HOST, start_s=20, duration_s=86400, card=0, want_bytes=4 * GIB),
)


def _workload(model, shape, weights_gib, mean, p95, peak_hour, latency_s):
    return Workload(
        model,
        "vllm",
        shape,
        int(weights_gib * GIB),
        1 * GIB,
        2048,
        Traffic(mean, p95, peak_hour, noise_sigma=0.15),
        latency_s,
        restart_s=RESTART_S,
        context_bytes=512 * MIB,
    )


def operations_host(mps_crashes_at: tuple[tuple[int, float], ...] = ()) -> HostSpec:
    deployments = (
        DeploymentSpec(
            "chat-70b-awq", _workload("chat-70b-awq", _LLAMA_70B, 40, 8, 16, 14, 0.5), (0,),
            8 * GIB, "queue",
        ),
        DeploymentSpec(
            "batch-8b", _workload("batch-8b", _LLAMA_8B, 14, 20, 40, 3, 0.2), (0,),
            12 * GIB, "queue",
        ),
        DeploymentSpec(
            "embed-mps-a", _workload("embed-mps-a", _LLAMA_8B, 6, 10, 20, 12, 0.05), (1,),
            4 * GIB, "queue", mps_thread_percentage=50,
        ),
        DeploymentSpec(
            "embed-mps-b", _workload("embed-mps-b", _LLAMA_8B, 6, 10, 20, 15, 0.05), (1,),
            4 * GIB, "queue", mps_thread_percentage=50,
        ),
        DeploymentSpec(
            "code-8b", _workload("code-8b", _LLAMA_8B, 16, 20, 45, 11, 0.1), (2,),
            6 * GIB, None,
        ),
    )  # fmt: skip
    cards = (
        CardSpec("A100-SXM4-80GB"),
        CardSpec("A100-SXM4-80GB", mps=True),
        CardSpec("A100-SXM4-80GB"),
    )
    return HostSpec(
        HOST,
        cards,
        deployments,
        xid_per_card_day=0.0,
        mps_recovery="manual",
        mps_crashes_at=mps_crashes_at,
    )
