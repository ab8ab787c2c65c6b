"""The do_* actions of a combined load test the console runs: start, cancel, record progress
and the result. Each write opens a change and audits it; the result revises the proposal, so
its gates run again on what the console measured."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.core.auditing import Action
from console.core.auditing.changes import atomic_change, audited, record
from console.proposals import queue
from console.proposals.loadtest.plan import LoadTestPlan, PlanError
from console.proposals.models import LoadTest, Proposal
from console.proposals.services import revise
from console.proposals.transitions import Event, IllegalTransition, next_state

# Past the task's hard time limit, before a running test counts as lost.
LOST_GRACE_S = 60


class LoadTestBusy(Exception):
    """A combined test of this proposal is queued or running already."""


def _state(load_test: LoadTest) -> dict:
    """What the audit keeps of a load test: its state, not its figures (they are on it)."""
    return {
        "status": load_test.status,
        "cancel_requested": load_test.cancel_requested,
        "failure_code": load_test.failure_code,
    }


def running_test(proposal: Proposal) -> LoadTest | None:
    return proposal.load_tests.exclude(status__in=LoadTest.FINISHED).first()


@atomic_change
def do_start_load_test(proposal: Proposal, *, acting_user, plan: LoadTestPlan) -> LoadTest:
    limit = settings.LOADTEST_TASK_TIME_LIMIT_S - settings.LOADTEST_FLUSH_WAIT_S - 60
    if plan.duration_s > limit:
        raise PlanError("too_long", duration_s=plan.duration_s, limit_s=round(limit))
    current = Proposal.objects.select_for_update().get(pk=proposal.pk)
    next_state(current.state, Event.EDIT)  # its result revises the proposal: refuse it early
    if running_test(current) is not None:
        raise LoadTestBusy(current.pk)
    load_test = LoadTest.objects.create(
        proposal=current,
        uploaded_by=acting_user,
        source_format=LoadTest.Format.MEASURED,
        files=[f"combined test of {len(plan.targets)} deployments on {plan.host}"],
        status=LoadTest.Status.QUEUED,
        plan=plan.to_json(),
    )
    record(
        actor=acting_user,
        action=Action.LOAD_TEST_START,
        obj=load_test,
        before=None,
        after=_state(load_test),
        host=current.host,
        comment=f"proposal {current.pk}: {plan.duration_s:g} s",
    )
    transaction.on_commit(lambda: queue.queue_load_test(load_test.pk))
    return load_test


@atomic_change
def do_cancel_load_test(load_test: LoadTest, *, acting_user) -> LoadTest:
    current = LoadTest.objects.select_for_update().get(pk=load_test.pk)
    if current.finished:
        return current
    with audited(current, Action.LOAD_TEST_CANCEL, acting_user, state=_state):
        current.cancel_requested = True
        if current.status == LoadTest.Status.QUEUED:
            current.status, current.finished_at = LoadTest.Status.CANCELLED, timezone.now()
        current.save()
    return current


def begin(load_test_id: int) -> LoadTest | None:
    """Queued -> running; None when there is nothing to run (cancelled, or run already)."""
    updated = LoadTest.objects.filter(pk=load_test_id, status=LoadTest.Status.QUEUED).update(
        status=LoadTest.Status.RUNNING, progress={"phase": "starting"}, started_at=timezone.now()
    )
    return LoadTest.objects.get(pk=load_test_id) if updated else None


def save_progress(load_test_id: int, progress: dict) -> None:
    # Not audited: progress is a view of the running test, rewritten every second.
    LoadTest.objects.filter(pk=load_test_id, status=LoadTest.Status.RUNNING).update(
        progress=progress
    )


def cancel_requested(load_test_id: int) -> bool:
    return LoadTest.objects.filter(pk=load_test_id, cancel_requested=True).exists()


@atomic_change
def do_finish_load_test(
    load_test_id: int,
    *,
    status: str,
    run: dict,
    result: dict,
    window: tuple | None,
    failure_code: str = "",
    failure_params: dict | None = None,
) -> LoadTest:
    current = LoadTest.objects.select_for_update().get(pk=load_test_id)
    with audited(current, Action.LOAD_TEST_FINISH, None, comment=status, state=_state):
        current.status = status
        current.run = run
        current.result = result
        current.window_start, current.window_end = window or (None, None)
        current.failure_code = failure_code
        current.failure_params = failure_params or {}
        current.finished_at = timezone.now()
        current.save()
    proposal = (
        Proposal.objects.select_for_update(of=("self",))
        .select_related("served_model", "host")
        .get(pk=current.proposal_id)
    )
    try:
        comment = f"combined load test {current.pk}: {status}"
        with audited(proposal, Action.PROPOSAL_LOAD_TEST, current.uploaded_by,
                     host=proposal.host, comment=comment) as row:  # fmt: skip
            revise(proposal, row)
    except IllegalTransition:
        pass  # decided meanwhile: the result stays on record, the decision stands
    return current


def lost_tests(now) -> list[int]:
    """Tests still running past their task's hard time limit: the worker that ran them was
    killed or lost (the limit would have ended them otherwise)."""
    cutoff = now - dt.timedelta(seconds=settings.LOADTEST_TASK_TIME_LIMIT_S + LOST_GRACE_S)
    running = LoadTest.objects.filter(status=LoadTest.Status.RUNNING, started_at__lt=cutoff)
    return list(running.values_list("pk", flat=True))


@atomic_change
def do_give_up_lost_test(load_test_id: int) -> LoadTest:
    """A lost test recorded as failed, with the phase it had reached; the proposal is revised
    as by any finished test, so its gates are checked again. One that finished meanwhile is
    left as it is."""
    current = LoadTest.objects.select_for_update().get(pk=load_test_id)
    if current.status != LoadTest.Status.RUNNING:
        return current
    return do_finish_load_test(
        load_test_id,
        status=LoadTest.Status.FAILED,
        run={},
        result={},
        window=None,
        failure_code="worker_lost",
        failure_params={
            "limit_s": settings.LOADTEST_TASK_TIME_LIMIT_S,
            "phase": current.progress.get("phase", ""),
        },
    )
