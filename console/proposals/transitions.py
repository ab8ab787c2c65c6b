"""The proposal state machine (pure: no Django).

    draft --submit--> submitted --start checks--> checking --checks passed--> ready for approval
    checking --checks failed--> changes requested --submit--> submitted
    ready for approval --approve--> approved --apply--> applied --verify--> verified
    ready for approval --request changes--> changes requested
    ready for approval, changes requested --reject--> rejected (final)
    applied, verified --roll back--> rolled back (final)

Any edit after checks have run (submitted, checking, ready, changes requested, approved) sends
the proposal back to submitted: its checks run again and earlier approvals no longer count. A
draft stays a draft when edited.
"""

from enum import StrEnum


class State(StrEnum):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    CHECKING = "checking"
    READY = "ready_for_approval"
    CHANGES_REQUESTED = "changes_requested"
    APPROVED = "approved"
    REJECTED = "rejected"
    APPLIED = "applied"
    VERIFIED = "verified"
    ROLLED_BACK = "rolled_back"

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


class Event(StrEnum):
    SUBMIT = "submit"
    EDIT = "edit"
    START_CHECKS = "start_checks"
    CHECKS_PASSED = "checks_passed"
    CHECKS_FAILED = "checks_failed"
    APPROVE = "approve"
    REJECT = "reject"
    REQUEST_CHANGES = "request_changes"
    APPLY = "apply"
    VERIFY = "verify"
    ROLL_BACK = "roll_back"

    @property
    def verb(self) -> str:
        return self.value.replace("_", " ")


_CHECKED = (State.SUBMITTED, State.CHECKING, State.READY, State.CHANGES_REQUESTED, State.APPROVED)

TRANSITIONS: dict[Event, dict[State, State]] = {
    Event.SUBMIT: {State.DRAFT: State.SUBMITTED, State.CHANGES_REQUESTED: State.SUBMITTED},
    Event.EDIT: {State.DRAFT: State.DRAFT, **dict.fromkeys(_CHECKED, State.SUBMITTED)},
    Event.START_CHECKS: {State.SUBMITTED: State.CHECKING},
    Event.CHECKS_PASSED: {State.CHECKING: State.READY},
    Event.CHECKS_FAILED: {State.CHECKING: State.CHANGES_REQUESTED},
    Event.APPROVE: {State.READY: State.APPROVED},
    Event.REJECT: {State.READY: State.REJECTED, State.CHANGES_REQUESTED: State.REJECTED},
    Event.REQUEST_CHANGES: {State.READY: State.CHANGES_REQUESTED},
    Event.APPLY: {State.APPROVED: State.APPLIED},
    Event.VERIFY: {State.APPLIED: State.VERIFIED},
    Event.ROLL_BACK: {State.APPLIED: State.ROLLED_BACK, State.VERIFIED: State.ROLLED_BACK},
}


_PAST = {
    Event.SUBMIT: "submitted",
    Event.EDIT: "edited",
    Event.START_CHECKS: "checked",
    Event.CHECKS_PASSED: "passed",
    Event.CHECKS_FAILED: "failed",
    Event.APPROVE: "approved",
    Event.REJECT: "rejected",
    Event.REQUEST_CHANGES: "sent back for changes",
    Event.APPLY: "applied",
    Event.VERIFY: "verified",
    Event.ROLL_BACK: "rolled back",
}


class IllegalTransition(Exception):
    def __init__(self, state: State, event: Event):
        self.state, self.event = state, event
        allowed = " or ".join(s.label for s in TRANSITIONS[event])
        super().__init__(
            f"Cannot {event.verb} a proposal that is {state.label}: "
            f"only a proposal that is {allowed} can be {_PAST[event]}."
        )


def next_state(state: State | str, event: Event | str) -> State:
    state, event = State(state), Event(event)
    try:
        return TRANSITIONS[event][state]
    except KeyError:
        raise IllegalTransition(state, event) from None


def allowed(state: State | str, event: Event | str) -> bool:
    return State(state) in TRANSITIONS[Event(event)]
