"""Scenario hosts and the demo fleet, from the placement files in inventory/scenarios/.

The placement files give cards and per-card memory; the workload side (traffic, model shapes,
tokens per request) is defined here, and chosen so that the grouped layout of the 8-card
scenario reproduces the file's `memory_mib` per card from P95 concurrency + 20% buffer.

Calibration targets (scenarios/README.md): at mean-based KV reservations, time-sharing all
eight cards, the host sees 3-4 OOMs a day and P99 about 800 ms with ~300 ms interference
spikes; at P95 + 20% reservations bound to their own card groups, no OOM, P99 about 320 ms and
interference under 50 ms.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Literal

from inventory.telemetry.simulator.catalogue import H200_CAPTURED_LAYOUT, MIB, MigSlice
from inventory.telemetry.simulator.host import CardSpec, DeploymentSpec, HostSpec
from inventory.telemetry.simulator.workload import ModelShape, ReservationBasis, Traffic, Workload

GIB = 1024 * MIB
DEMO_EPOCH = 1767571200.0  # 2026-01-05T00:00:00Z, a Monday: simulated t=0 is midnight UTC

EIGHT_CARD_FILE = "seed-8card-3models.json"
A100_FILE = "seed-3xa100-5models.json"

_LLAMA_70B = ModelShape(layers=80, kv_heads=8, head_dim=128)
_CODE_34B = ModelShape(layers=48, kv_heads=8, head_dim=128)
_LLAMA_8B = ModelShape(layers=32, kv_heads=8, head_dim=128)
_QWEN_1_5B = ModelShape(layers=28, kv_heads=2, head_dim=128)
_QWEN_32B = ModelShape(layers=64, kv_heads=8, head_dim=128)
_BERT_LARGE = ModelShape(layers=24, kv_heads=16, head_dim=64)

# The 8-card field report's three models. P95 concurrency x tokens x KV bytes/token x 1.2,
# plus weights share, workspace and CUDA context, gives the placement file's memory_mib.
EIGHT_CARD_WORKLOADS: dict[str, Workload] = {
    "chat-large": Workload(
        model="chat-large",
        engine="vllm",
        shape=_LLAMA_70B,
        weights_bytes=70 * 10**9,
        workspace_bytes=4 * GIB,
        tokens_per_request=2500,
        traffic=Traffic(mean_concurrency=56, p95_concurrency=127, peak_hour=14.0, noise_sigma=0.13),
        base_latency_s=0.15,
        restart_s=300.0,
    ),
    "code-medium": Workload(
        model="code-medium",
        engine="sglang",
        shape=_CODE_34B,
        weights_bytes=34 * 10**9,
        workspace_bytes=3 * GIB,
        tokens_per_request=4000,
        traffic=Traffic(
            mean_concurrency=62, p95_concurrency=140, peak_hour=14.75, noise_sigma=0.13
        ),
        base_latency_s=0.135,
        restart_s=180.0,
    ),
    "embed-small": Workload(
        model="embed-small",
        engine="tgi",
        shape=_LLAMA_8B,
        weights_bytes=16 * 10**9,
        workspace_bytes=2 * GIB,
        tokens_per_request=1024,
        traffic=Traffic(
            mean_concurrency=175, p95_concurrency=400, peak_hour=14.4, noise_sigma=0.13
        ),
        base_latency_s=0.08,
        restart_s=90.0,
    ),
}

Layout = Literal["time_shared", "grouped"]


SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "scenarios"


def load_placement(filename: str) -> dict:
    with (SCENARIOS_DIR / filename).open() as handle:
        return json.load(handle)


def _next_power_of_two(n: int) -> int:
    power = 1
    while power < n:
        power *= 2
    return power


def eight_card_host(
    layout: Layout,
    basis: ReservationBasis,
    buffer: float = 0.0,
    admission: Literal["queue"] | None = None,
    xid_per_card_day: float = 0.0,
    placement: dict | None = None,
) -> HostSpec:
    """The 8-card scenario host in one of its two configurations.

    grouped: each model on its own group of cards, sized as in the placement file.
    time_shared: every model across all eight cards, as data-parallel replicas of
    tensor-parallel groups (TP = next power of two of the model's card count), so every card
    holds a shard of every model and their SMs are time-sliced.
    """
    placement = placement or load_placement(EIGHT_CARD_FILE)
    gpus = placement["gpus"]
    host = gpus[0]["host"]
    cards = tuple(CardSpec(g["type"]) for g in gpus)
    deployments = []
    next_card = 0
    for model in placement["models"]:
        workload = EIGHT_CARD_WORKLOADS[model["name"]]
        reservation = workload.kv_reservation_bytes(basis, buffer)
        if layout == "grouped":
            group = tuple(range(next_card, next_card + model["gpus"]))
            next_card += model["gpus"]
            deployments.append(
                DeploymentSpec(workload.model, workload, group, reservation, admission)
            )
            continue
        tp = _next_power_of_two(model["gpus"])
        replicas = len(cards) // tp
        for replica in range(replicas):
            deployments.append(
                DeploymentSpec(
                    f"{workload.model}-r{replica}",
                    workload,
                    tuple(range(replica * tp, (replica + 1) * tp)),
                    reservation // replicas,
                    admission,
                    traffic_share=1.0 / replicas,
                )
            )
    return HostSpec(host, cards, tuple(deployments), xid_per_card_day=xid_per_card_day)


def before_host(**overrides) -> HostSpec:
    """The field report's starting point: time-shared, KV reserved at the mean, no policy."""
    return eight_card_host("time_shared", "mean", **overrides)


def after_host(**overrides) -> HostSpec:
    """The field report's end point: card groups, KV at P95 + 20%, excess queued."""
    return eight_card_host("grouped", "p95", buffer=0.2, admission="queue", **overrides)


def _small(
    model: str,
    engine: str,
    shape: ModelShape,
    weights: float,
    kv_gib: float,
    mean: float,
    p95: float,
    peak_hour: float,
    latency_s: float,
    tokens: int = 2048,
) -> tuple[Workload, int]:
    workload = Workload(
        model,
        engine,
        shape,
        int(weights),
        1 * GIB,
        tokens,
        Traffic(mean, p95, peak_hour, noise_sigma=0.2),
        latency_s,
        restart_s=60.0,
    )
    return workload, int(kv_gib * GIB)


def a100_host(placement: dict | None = None) -> HostSpec:
    """3 x A100 with the five quantized models of the second field report, packed first-fit
    decreasing with 4 GiB headroom: 45 + 30 GiB on card 0, 25 + 20 + 15 GiB on card 1, card 2
    left empty for an exclusive model. Served by Ollama, which preallocates KV per context and
    queues the excess."""
    placement = placement or load_placement(A100_FILE)
    gpus = placement["gpus"]
    host = gpus[0]["host"]
    sizes = {m["name"]: m["memory_mib"] for m in placement["models"]}
    room = [g["memory_mib"] - 4096 for g in gpus]
    packing: dict[int, list[str]] = {index: [] for index in range(len(gpus))}
    for name in sorted(sizes, key=sizes.__getitem__, reverse=True):
        card = next(i for i in range(len(gpus)) if sizes[name] <= room[i])
        room[card] -= sizes[name]
        packing[card].append(name)
    deployments = []
    for card, names in packing.items():
        for offset, name in enumerate(names):
            total = sizes[name] * MIB
            kv = min(4 * GIB, total // 8)
            context = 512 * MIB
            workspace = 512 * MIB
            workload = Workload(
                name,
                "ollama",
                _LLAMA_8B,
                total - kv - workspace - context,
                workspace,
                4096,
                Traffic(2.0 + offset, 5.0 + 2 * offset, 10.0 + 2 * offset, noise_sigma=0.25),
                base_latency_s=0.4,
                restart_s=120.0,
            )
            deployments.append(DeploymentSpec(name, workload, (card,), kv, "queue"))
    cards = tuple(CardSpec(g["type"]) for g in gpus)
    return HostSpec(host, cards, tuple(deployments), xid_per_card_day=0.02)


def mig_host() -> HostSpec:
    """2 x H200 with MIG: card 0 partitioned exactly as the H200 MIG capture (a 3g.71gb GPU
    instance split in two compute instances, a 2g.35gb, two 1g.18gb), card 1 as a 3g.71gb, a
    2g.35gb and a 1g.18gb (7 of 8 memory slices: a valid MIG geometry). One tenant runs in a
    container: NVML on the host reports its process and used memory, but under a host PID the
    agent's PID namespace cannot name."""
    card1_layout = (
        MigSlice("3g.71gb", 1, start_slot=0),
        MigSlice("2g.35gb", 3, start_slot=4),
        MigSlice("1g.18gb", 9, start_slot=6),
    )
    capture = H200_CAPTURED_LAYOUT
    llama, qwen, bert = _LLAMA_8B, _QWEN_1_5B, _BERT_LARGE
    # (card, MIG device, workload): model, engine, shape, weights B, KV GiB, mean, P95, peak h,
    # base latency s[, tokens per request]
    entries = [
        (0, capture[0], _small("llama31-8b-a", "vllm", llama, 16e9, 12, 20, 45, 13.0, 0.09)),
        (0, capture[1], _small("llama31-8b-b", "sglang", llama, 16e9, 12, 20, 45, 15.0, 0.09)),
        (0, capture[2], _small("mistral-7b", "vllm", llama, 14.5e9, 14, 15, 35, 11.0, 0.08)),
        (0, capture[3], _small("qwen2-1.5b", "vllm", qwen, 3.1e9, 8, 30, 70, 16.0, 0.04)),
        # bge-m3 is an encoder (XLM-RoBERTa) served by TEI (text-embeddings-inference): no KV
        # cache, so no KV reservation, and TEI's own metrics (te_queue_size, te_request_*).
        (0, capture[4], _small("bge-m3", "tei", bert, 1.2e9, 0, 40, 90, 9.0, 0.02, 512)),
        (1, card1_layout[0], _small("qwen25-32b", "vllm", _QWEN_32B, 19e9, 40, 25, 60, 14, 0.16)),
        (1, card1_layout[1], _small("llama31-8b-c", "vllm", llama, 16e9, 10, 30, 80, 14.5, 0.09)),
        (1, card1_layout[2], _small("qwen2-1.5b-burst", "vllm", qwen, 3.1e9, 4, 70, 175, 14, 0.04)),
    ]
    deployments = []
    for card, mig_slice, (workload, kv) in entries:
        model = workload.model
        deployments.append(
            DeploymentSpec(
                model,
                workload,
                (card,),
                kv,
                # the burst tenant spills instead of queueing: its OOMs stay inside its slice
                None if model == "qwen2-1.5b-burst" else "queue",
                mig_slice=mig_slice,
                containerized=model == "qwen2-1.5b",
                metrics_generation="v0" if model == "mistral-7b" else "v1",
            )
        )
    cards = (CardSpec("H200", H200_CAPTURED_LAYOUT), CardSpec("H200", card1_layout))
    return HostSpec("mig-h200", cards, tuple(deployments), xid_per_card_day=0.02)


def mps_host(mps_crash_per_card_day: float = 0.5) -> HostSpec:
    """2 x L40S, each shared through MPS by small models with active thread percentages."""
    entries = [
        (0, 30, _small("qwen2-1.5b-chat", "vllm", _QWEN_1_5B, 3.1e9, 6, 20, 50, 13.0, 0.05)),
        (0, 30, _small("phi3-mini", "vllm", _LLAMA_8B, 7.6e9, 6, 10, 25, 14.0, 0.07)),
        (0, 40, _small("llama32-3b", "sglang", _LLAMA_8B, 6.4e9, 8, 15, 35, 15.0, 0.06)),
        (1, 50, _small("gemma2-2b", "vllm", _LLAMA_8B, 5.2e9, 8, 15, 35, 12.0, 0.05)),
        (1, 50, _small("bge-m3-mps", "tei", _BERT_LARGE, 1.2e9, 0, 40, 90, 10.0, 0.02, 512)),
    ]
    deployments = tuple(
        DeploymentSpec(w.model, w, (card,), kv, "queue", mps_thread_percentage=pct)
        for card, pct, (w, kv) in entries
    )
    cards = (CardSpec("L40S", mps=True), CardSpec("L40S", mps=True))
    return HostSpec(
        "mps-l40s",
        cards,
        deployments,
        xid_per_card_day=0.02,
        mps_crash_per_card_day=mps_crash_per_card_day,
    )


def demo_fleet_specs() -> list[HostSpec]:
    """The demo fleet: the 8-card server before (infer-00) and after (infer-01) the field
    report's fix, the 3 x A100 host, the MIG host and the MPS host."""
    before = replace(before_host(xid_per_card_day=0.02), name="infer-00")
    return [before, after_host(xid_per_card_day=0.02), a100_host(), mig_host(), mps_host()]
