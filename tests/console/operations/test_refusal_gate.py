"""A card that refuses new loads: the memory gate fails on it and the solver never picks it,
until an approver clears it."""

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from console.operations.services import do_clear_refusal, do_set_refusal
from console.proposals.gate_checks import check_memory
from console.proposals.gates import GateStatus
from inventory.models import Deployment
from tests.console.proposals.support import create_proposal, seed_host
from tests.factories import GIB, ServedModelFactory

pytestmark = pytest.mark.django_db


def _solver_proposal(personas, host):
    return create_proposal(
        personas["oncall"],
        host=host,
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=8 * GIB),
        let_solver_choose=True,
        isolation_mode=Deployment.Isolation.GPU_GROUP,
    )


def test_a_refused_card_fails_the_gate_and_the_solver_leaves_it_out(personas):
    host = seed_host()
    free = host.gpus.get(index=2)
    refusal = do_set_refusal(free, reason_code="degradation")
    named = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[free],
        model=ServedModelFactory(name="tiny", weights_bytes=2 * GIB),
        kv_reservation_bytes=GIB,
    )
    outcome, _ = check_memory(named, timezone.now())
    assert outcome.status is GateStatus.FAIL
    assert outcome.summary.code == "gate.memory.refused"
    outcome, chosen = check_memory(_solver_proposal(personas, host), timezone.now())
    assert free not in chosen  # the only free card for a GPU group: the solver finds none
    assert outcome.status is GateStatus.FAIL

    with pytest.raises(PermissionDenied):
        do_clear_refusal(refusal, acting_user=personas["manager"])
    do_clear_refusal(refusal, acting_user=personas["approver"])
    outcome, _ = check_memory(named, timezone.now())
    assert outcome.status is GateStatus.PASS, outcome.summary
    _, chosen = check_memory(_solver_proposal(personas, host), timezone.now())
    assert chosen == [free]


def test_a_check_as_of_an_earlier_moment_sees_the_refusals_of_that_moment(personas):
    import datetime as dt

    host = seed_host()
    card = host.gpus.get(index=2)
    named = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[card],
        model=ServedModelFactory(name="tiny", weights_bytes=2 * GIB),
        kv_reservation_bytes=GIB,
    )
    before = timezone.now() - dt.timedelta(minutes=10)
    refusal = do_set_refusal(card, reason_code="degradation")
    # The demo's history checks its proposals as of days ago: a refusal set since did not hold.
    assert check_memory(named, before)[0].status is GateStatus.PASS
    assert check_memory(named, timezone.now())[0].status is GateStatus.FAIL
    during = timezone.now()
    do_clear_refusal(refusal, acting_user=personas["approver"])
    # Cleared since: a check as of when it held still fails.
    assert check_memory(named, during)[0].status is GateStatus.FAIL
    assert check_memory(named, timezone.now())[0].status is GateStatus.PASS
