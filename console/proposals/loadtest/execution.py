"""Running a combined load test to its figures: drive the plan, wait for the telemetry that
covers its end, and compose the result. Shared by the Celery task and ``manage.py loadtest``."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from console.proposals.gates.loadtest_report import LoadTestRun
from console.proposals.loadtest import inputs as loadtest_inputs
from console.proposals.loadtest.plan import LoadTestPlan
from console.proposals.loadtest.results import (
    as_run,
    card_peaks,
    first_bound,
    latency_series,
    model_summaries,
)
from console.proposals.loadtest.runner import RunOutcome, run_plan
from inventory.models import Gpu

FLUSH_POLL_S = 1.0


@dataclass
class Executed:
    outcome: RunOutcome
    run: LoadTestRun
    result: dict
    window: tuple[dt.datetime, dt.datetime]
    status: str  # "done", "failed" or "cancelled"
    failure_code: str = ""
    failure_params: dict | None = None


def _moment(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def wait_for_flush(gpus: list[Gpu], moment: dt.datetime, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        if loadtest_inputs.flushed_past(gpus, moment):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(FLUSH_POLL_S)


def endpoint_failures(summaries: list[dict]) -> dict:
    """Per model whose endpoint answered none of its requests (refused, timed out, garbage,
    an error status): its errors by code. Such a run measured nothing of that model and
    fails. A model that answered some and then failed (a replica that ran out of memory and
    restarted under the combined load) is a finding of the test: gate 4 reports its failures
    (requests_failed, over MAX_FAILED_SHARE)."""
    failing = {}
    for row in summaries:
        if row["sent"] == 0 or row["completed"] == 0:
            failing[row["model"]] = {
                "sent": row["sent"],
                "failed": row["failed"],
                "errors": row["errors"],
                "detail": row["error_detail"],
            }
    return failing


def run_to_end(coroutine):
    """asyncio.run, also from a thread whose event loop already runs (a caller embedding the
    command, or Playwright's in tests): the runner then gets a thread and a loop of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def execute(
    plan: LoadTestPlan,
    gpus: list[Gpu],
    bounds: dict[str, int],
    *,
    progress: Callable[[dict], None] = lambda snapshot: None,
    cancelled: Callable[[], bool] = lambda: False,
    flush_wait_s: float | None = None,
) -> Executed:
    outcome = run_to_end(run_plan(plan, progress=progress, cancelled=cancelled))
    start, end = _moment(outcome.started_at), _moment(outcome.ended_at)
    flushed = wait_for_flush(
        gpus, end, settings.LOADTEST_FLUSH_WAIT_S if flush_wait_s is None else flush_wait_s
    )
    samples = loadtest_inputs.card_samples(gpus, start, end)
    peaks = card_peaks(samples)
    summaries = model_summaries(plan, outcome)
    series = latency_series(plan, outcome)
    result = {
        "models": summaries,
        "series": series,
        "cards": [
            {"card": card, "peak_bytes": peaks.get(card), "bound_bytes": bound}
            for card, bound in bounds.items()
        ],
        "first_bound": first_bound(plan, outcome.started_at, series, samples, bounds),
        "telemetry_flushed": flushed,
        "cold_start": outcome.cold_start,
        "phase_starts": outcome.phase_starts,
        "placement": {
            "cards": sorted(bounds),
            "isolation": {t.name: t.isolation for t in plan.targets},
        },
        "requests": len(outcome.records),
    }
    executed = Executed(
        outcome, as_run(plan, outcome, summaries, peaks), result, (start, end), "done"
    )
    failing = endpoint_failures(summaries)
    if outcome.cancelled:
        executed.status = "cancelled"
    elif failing:
        executed.status, executed.failure_code = "failed", "endpoint_errors"
        executed.failure_params = {"models": failing}
    return executed
