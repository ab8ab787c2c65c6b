"""The Celery task that runs a combined load test the console started.

It takes the test's primary key and does nothing for a test that is not queued (a repeated or
late message), so it is safe to deliver twice. It is acknowledged on receipt, not when done: a
test runs longer than the broker's visibility timeout, and a test cut off by a lost worker is
not replayed half-way: `resume_stalled` records it failed (worker_lost) once it has run past
this task's time limit, and a person starts it again. Whatever an endpoint does, the task ends
with the test recorded: failed with a reason, never an exception out of the worker.
"""

import datetime as dt
import logging
import time

from celery import shared_task
from django.conf import settings

from console.proposals import queue
from console.proposals.budgets import card_budgets
from console.proposals.loadtest import inputs as loadtest_inputs
from console.proposals.loadtest import services as loadtest_services
from console.proposals.loadtest.execution import execute
from console.proposals.loadtest.plan import LoadTestPlan
from console.proposals.models import LoadTest, Proposal
from inventory.models import Gpu

log = logging.getLogger(__name__)

# Card peaks shown live are read from telemetry this often, not on every progress tick.
LIVE_PEAKS_EVERY_S = 5.0


def bounds_for(proposal: Proposal, gpus: list[Gpu]) -> dict[str, int]:
    budgets = card_budgets(proposal.host, proposal.leaving_ids())
    headroom = settings.GATE_HEADROOM_BYTES
    return {str(gpu): budgets[gpu].usable_bytes - headroom for gpu in gpus if gpu in budgets}


@shared_task(
    name=queue.RUN_LOAD_TEST,
    time_limit=settings.LOADTEST_TASK_TIME_LIMIT_S,
    soft_time_limit=settings.LOADTEST_TASK_TIME_LIMIT_S - 30,
    acks_late=False,
    ignore_result=True,
)
def run_load_test(load_test_id: int) -> str:
    test = loadtest_services.begin(load_test_id)
    if test is None:
        return "nothing to do"
    proposal = Proposal.objects.select_related("host", "served_model").get(pk=test.proposal_id)
    plan = LoadTestPlan.from_json(test.plan)
    gpus = proposal.target_gpus()
    bounds = bounds_for(proposal, gpus)
    started = time.time()
    live = {"at": 0.0, "cards": {}}

    def progress(snapshot: dict) -> None:
        now = time.time()
        if now - live["at"] >= LIVE_PEAKS_EVERY_S:
            live["at"] = now
            start = dt.datetime.fromtimestamp(started, tz=dt.UTC)
            end = dt.datetime.fromtimestamp(now, tz=dt.UTC)
            live["cards"] = loadtest_inputs.telemetry_peaks(gpus, start, end)
        cards = [
            {"card": card, "peak_bytes": live["cards"].get(card), "bound_bytes": bound}
            for card, bound in bounds.items()
        ]
        loadtest_services.save_progress(load_test_id, snapshot | {"cards": cards})

    try:
        executed = execute(
            plan,
            gpus,
            bounds,
            progress=progress,
            cancelled=lambda: loadtest_services.cancel_requested(load_test_id),
        )
    except Exception as error:  # recorded as the test's failure: the worker carries on
        log.exception("load test %s could not run", load_test_id)
        loadtest_services.do_finish_load_test(
            load_test_id,
            status=LoadTest.Status.FAILED,
            run={},
            result={},
            window=None,
            failure_code="runner_error",
            failure_params={"error": f"{type(error).__name__}: {error}"[:300]},
        )
        return "failed"
    loadtest_services.do_finish_load_test(
        load_test_id,
        status=executed.status,
        run=executed.run.to_json(),
        result=executed.result,
        window=executed.window,
        failure_code=executed.failure_code,
        failure_params=executed.failure_params,
    )
    return executed.status
