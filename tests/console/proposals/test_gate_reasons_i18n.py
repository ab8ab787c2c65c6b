"""A gate result stored as a code reads in the reader's language, on the page and in the API."""

import pytest
from django.conf import settings
from django.utils import translation

from console.proposals import services
from console.proposals.gates import Checked, Gate, GateOutcome, GateStatus
from console.proposals.gates.engine_settings import (
    CardEngines,
    EngineSettingsRequest,
    engine_claim,
    evaluate_engine_settings,
)
from console.proposals.gates.isolation import IsolationRequest, evaluate_isolation
from console.proposals.gates.kv import KvRequest, evaluate_kv
from console.proposals.gates.loadtest import Colocated, LoadTestRequest, evaluate_load_test
from console.proposals.gates.memory import CardBudget, MemoryRequest, Share, evaluate_memory
from console.proposals.models import GateResult
from inventory.analytics.reasons import Reason
from tests.console.proposals.support import create_proposal
from tests.factories import GIB

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


def _failures() -> list:
    """One real failure of every gate, from the gates' own code."""
    card = CardBudget("h1:0", 80 * GIB, GIB, (), 0, None, "green", True)
    claims = (engine_claim("chat", "vllm", total_bytes=80 * GIB),)
    return [
        evaluate_memory(
            MemoryRequest("big-model", Share(90 * GIB, GIB, GIB), 4 * GIB, (), (card,))
        ),
        evaluate_kv(KvRequest("big-model", "p95", 8 * GIB, "none", 0.2, 1024.0, 512.0, None)),
        evaluate_isolation(IsolationRequest("big-model", "mps", ("chat",), ())),
        evaluate_load_test(
            LoadTestRequest((Colocated("big-model", 700, ("h1:0",), 1.0),), {"h1:0": GIB}, None)
        ),
        evaluate_engine_settings(
            EngineSettingsRequest(
                "big-model",
                4 * GIB,
                (CardEngines("h1:0", 80 * GIB, (*claims, engine_claim("code", "vllm",
                                                                    total_bytes=80 * GIB))),),
            )
        ),
    ]  # fmt: skip


# Each gate's failure, as each language reads it.
SAYS = {
    Gate.MEMORY: ("No single card can hold big-model", "没有任何单张卡能容纳 big-model"),
    Gate.KV: ("No admission/degradation policy", "超出预留的需求没有准入/降级策略"),
    Gate.ISOLATION: ("Needs GPU groups, MIG or an acknowledgement", "需要 GPU 组、MIG 或确认"),
    Gate.LOAD_TEST: ("No combined load test: drive big-model at once.", "没有联合压测"),
    Gate.ENGINE_SETTINGS: (
        "h1:0: the engines&#x27; memory settings add up to 200%",
        "h1:0：各引擎的显存设置合计占该卡的 200%",
    ),
}


@pytest.mark.parametrize(("recorded_in", "read_in"), [("en", "zh-hans"), ("zh-hans", "en")])
def test_every_gate_failure_reads_in_the_readers_language(
    client_as, personas, recorded_in, read_in
):
    author = personas["oncall"]
    proposal = create_proposal(author)
    services.do_submit(proposal, acting_user=author)
    services.do_start_checks(proposal.pk, proposal.revision)
    outcomes = _failures()
    assert {o.gate for o in outcomes} == set(Gate)
    assert all(o.status is GateStatus.FAIL for o in outcomes)
    with translation.override(recorded_in):
        services.do_record_gate_results(proposal.pk, proposal.revision, Checked(outcomes, []))
    for result in GateResult.objects.filter(proposal=proposal):
        assert result.summary_reason["code"].startswith("gate.")
        assert SAYS[Gate(result.gate)][0].replace("&#x27;", "'") in result.summary  # English
    client = client_as("oncall")
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = read_in
    page = client.get(f"/proposals/{proposal.pk}/").content.decode()
    shown, hidden = (1, 0) if read_in == "zh-hans" else (0, 1)
    for gate, says in SAYS.items():
        # The gate's card; the audit trail below keeps its comments in English on purpose.
        card = page.split(f'id="gate-{gate.value}"', 1)[1].split("</section>", 1)[0]
        assert says[shown] in card, gate
        assert says[hidden] not in card, gate
