"""A gate result stored as a code reads in the reader's language, on the page and in the API."""

import pytest

from console.proposals import services
from console.proposals.gate_checks import Checked
from console.proposals.gates import Gate, GateOutcome, GateStatus
from console.proposals.models import GateResult
from console.reasons import Reason
from tests.proposals.support import create_proposal

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
NO_ROOM = Reason(
    "placement.one_card",
    {"memory": 81920, "free": 79872, "card": "h1:0", "note": "", "closed": ""},
)


def _checked_with_a_coded_failure(author):
    proposal = create_proposal(author)
    services.do_submit(proposal, acting_user=author)
    services.do_start_checks(proposal.pk, proposal.revision)
    outcomes = [
        GateOutcome(
            gate,
            GateStatus.FAIL if gate is Gate.MEMORY else GateStatus.PASS,
            NO_ROOM if gate is Gate.MEMORY else f"{gate.title}: fine (test figures).",
            reasons=(NO_ROOM, "an old-style sentence") if gate is Gate.MEMORY else (),
        )
        for gate in Gate
    ]
    return services.do_record_gate_results(proposal.pk, proposal.revision, Checked(outcomes, []))


def test_a_coded_gate_failure_reads_in_chinese_and_back(client_as, personas):
    proposal = _checked_with_a_coded_failure(personas["oncall"])
    stored = GateResult.objects.get(proposal=proposal, gate=Gate.MEMORY)
    assert stored.summary_reason == NO_ROOM.to_json()
    assert stored.summary == "needs 81920 MiB on one card; largest free is 79872 MiB (h1:0)"
    client = client_as("oncall")
    chinese = client.get(f"/proposals/{proposal.pk}/", **ZH).content.decode()
    assert "需要单卡 81920 MiB；最大空闲为 79872 MiB（h1:0）" in chinese
    assert "an old-style sentence" in chinese  # text from a gate not yet on codes still shows
    english = client.get(f"/proposals/{proposal.pk}/", **EN).content.decode()
    assert "needs 81920 MiB on one card; largest free is 79872 MiB (h1:0)" in english
    assert "需要单卡" not in english


def test_the_api_renders_gate_reasons_in_the_request_language(client_as, personas):
    proposal = _checked_with_a_coded_failure(personas["oncall"])
    client = client_as("approver")
    answer = client.get(f"/api/proposals/{proposal.pk}/", **ZH).json()
    (memory,) = [gate for gate in answer["gates"] if gate["gate"] == "memory"]
    assert memory["summary"].startswith("需要单卡 81920 MiB")
    assert memory["reasons"] == [memory["summary"], "an old-style sentence"]
