import pytest

from console.proposals.transitions import (
    TRANSITIONS,
    Event,
    IllegalTransition,
    State,
    allowed,
    next_state,
)


def test_the_happy_path_from_draft_to_verified():
    state = State.DRAFT
    for event in (
        Event.SUBMIT,
        Event.START_CHECKS,
        Event.CHECKS_PASSED,
        Event.APPROVE,
        Event.APPLY,
        Event.VERIFY,
    ):
        state = next_state(state, event)
    assert state is State.VERIFIED


@pytest.mark.parametrize(
    ("state", "event", "expected"),
    [
        (State.CHECKING, Event.CHECKS_FAILED, State.CHANGES_REQUESTED),
        (State.READY, Event.REQUEST_CHANGES, State.CHANGES_REQUESTED),
        (State.CHANGES_REQUESTED, Event.SUBMIT, State.SUBMITTED),
        (State.READY, Event.REJECT, State.REJECTED),
        (State.APPLIED, Event.ROLL_BACK, State.ROLLED_BACK),
        (State.VERIFIED, Event.ROLL_BACK, State.ROLLED_BACK),
    ],
)
def test_side_paths(state, event, expected):
    assert next_state(state, event) is expected


@pytest.mark.parametrize(
    "state", [State.SUBMITTED, State.CHECKING, State.READY, State.CHANGES_REQUESTED, State.APPROVED]
)
def test_an_edit_after_checks_sends_the_proposal_back_to_the_gates(state):
    assert next_state(state, Event.EDIT) is State.SUBMITTED


def test_a_draft_stays_a_draft_when_edited():
    assert next_state(State.DRAFT, Event.EDIT) is State.DRAFT


@pytest.mark.parametrize(
    "state", [State.REJECTED, State.APPLIED, State.VERIFIED, State.ROLLED_BACK]
)
def test_decided_and_applied_proposals_cannot_be_edited(state):
    assert not allowed(state, Event.EDIT)
    with pytest.raises(IllegalTransition):
        next_state(state, Event.EDIT)


def test_an_illegal_transition_says_what_is_needed():
    with pytest.raises(IllegalTransition) as error:
        next_state(State.DRAFT, Event.APPROVE)
    assert str(error.value) == (
        "Cannot approve a proposal that is draft: only a proposal that is ready for approval "
        "can be approved."
    )
    with pytest.raises(IllegalTransition, match="only a proposal that is approved can be applied"):
        next_state("ready_for_approval", "apply")


def test_nothing_leaves_a_final_state():
    for state in (State.REJECTED, State.ROLLED_BACK):
        assert not any(state in sources for sources in TRANSITIONS.values())


def test_approval_only_from_ready():
    sources = TRANSITIONS[Event.APPROVE]
    assert list(sources) == [State.READY]
