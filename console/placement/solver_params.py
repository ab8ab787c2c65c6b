"""CP-SAT settings shared by the arc-flow and assignment models."""

from __future__ import annotations

import os
import time

from ortools.sat.python import cp_model

# CP-SAT runs a portfolio of strategies, one per worker; more than the cores only adds overhead.
MAX_WORKERS = 8
RANDOM_SEED = 20240601


# A solver always gets this long, even when building its model used up the deadline.
MIN_SEARCH_S = 0.05


def configure(solver: cp_model.CpSolver, deadline: float) -> None:
    """Search until `deadline` (a time.perf_counter() value): the time limit covers building
    the model as well as searching."""
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), MIN_SEARCH_S)
    solver.parameters.num_workers = max(1, min(MAX_WORKERS, os.cpu_count() or 1))
    solver.parameters.random_seed = RANDOM_SEED
    # Presolve otherwise breaks the symmetry between identical cards in its own way, which can
    # turn the greedy hint infeasible: the search then starts without it and may end worse.
    solver.parameters.keep_symmetry_in_presolve = True
