"""Which batches of a host's agent never arrived: the gaps in each sampler's sequence.

An agent numbers its batches 1, 2, 3, ... per sampler (one a process: a restarted agent begins
a new one). Ingest writes each batch once, in the order the broker delivers them, which is not
always the agent's: a killed ingest worker's group comes back after the broker's visibility
timeout, behind later batches, and the agent may have been restarted meanwhile. So each
sampler's range and count are kept, and a late batch closes its gap whichever sampler is the
current one. A gap before a sampler's first batch seen is not counted: the agent may have run
before the console knew its host.

The record is JSON (CollectorStatus.sequences): {"samplers": {sampler id: [first seq, last
seq, batches, latest interval end]}, "pruned_missing": n}, the least recently heard of
samplers beyond KEPT folded into pruned_missing with their gaps.
"""

from __future__ import annotations

KEPT = 8


def record(sequences: dict, sampler_id: str, seq: int, end: float) -> None:
    """Count one batch, written for the first time, of this sampler."""
    samplers = sequences.setdefault("samplers", {})
    entry = samplers.get(sampler_id)
    if entry is not None:
        first, last, count, seen = entry
        samplers[sampler_id] = [min(first, seq), max(last, seq), count + 1, max(seen, end)]
        return
    samplers[sampler_id] = [seq, seq, 1, end]
    if len(samplers) > KEPT:
        oldest = min(samplers, key=lambda key: samplers[key][3])
        sequences["pruned_missing"] = sequences.get("pruned_missing", 0) + _gap(
            samplers.pop(oldest)
        )


def missing(sequences: dict) -> int:
    """Batches sent that never arrived, of every sampler."""
    kept = sum(map(_gap, sequences.get("samplers", {}).values()))
    return sequences.get("pruned_missing", 0) + kept


def _gap(entry: list) -> int:
    first, last, count, _ = entry
    return max(0, last - first + 1 - count)
