"""Gate checks in flight: each gate's verdict as it finishes, before the results are stored.

Kept in the shared cache (every web worker reads it) for a revision's check; the stored gate
results replace it once the check ends, so a lost entry costs only the progress display.
"""

from django.core.cache import cache

from console.proposals.gates import Gate, GateOutcome

KEPT_S = 15 * 60


def _key(proposal_id: int, revision: int) -> str:
    return f"proposal-gates:{proposal_id}:{revision}"


def started(proposal_id: int, revision: int) -> None:
    cache.set(_key(proposal_id, revision), {}, KEPT_S)


def finished(proposal_id: int, revision: int, outcome: GateOutcome) -> None:
    done = cache.get(_key(proposal_id, revision)) or {}
    done[outcome.gate.value] = outcome.status.value
    cache.set(_key(proposal_id, revision), done, KEPT_S)


def gates_so_far(proposal_id: int, revision: int) -> list[dict]:
    """Every gate in checking order: its verdict once finished, else "waiting"."""
    done = cache.get(_key(proposal_id, revision)) or {}
    return [
        {"gate": gate.value, "title": gate.title, "status": done.get(gate.value, "waiting")}
        for gate in Gate
    ]
