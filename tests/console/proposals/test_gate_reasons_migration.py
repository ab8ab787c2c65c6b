"""Gate results stored as sentences, moved onto codes by migration 0008."""

import importlib

import pytest
from django.apps import apps

from console.core.reason_text import render_in
from console.proposals.models import GateResult
from tests.console.proposals.support import create_proposal

pytestmark = pytest.mark.django_db

migration = importlib.import_module("console.proposals.migrations.0008_gate_reasons_as_codes")
NO_RESULT = "No combined load test: drive phi-3-mini, chat at once."


def test_stored_codes_become_reasons_and_other_sentences_legacy_text(personas):
    proposal = create_proposal(personas["oncall"])
    common = {"proposal": proposal, "revision": 1, "status": "fail", "runbook_slug": "x"}
    load = GateResult.objects.create(
        **common,
        gate="load_test",
        summary=NO_RESULT,
        reasons=[NO_RESULT],
        numbers={"reason_codes": [{"code": "no_result", "params": {"models": "phi-3-mini, chat"}}]},
    )
    engine = GateResult.objects.create(
        **common,
        gate="engine_settings",
        summary="h:0: chat, code size their memory ...",
        reasons=["h:0: chat, code size their memory ..."],
        evidence={
            "reasons": [
                {"code": "simultaneous_start", "params": {"card": "h:0", "names": "chat, code"}}
            ]
        },
    )
    kv = GateResult.objects.create(
        **common, gate="kv", summary="There is no KV reservation.", reasons=["A sentence."]
    )
    migration.codes_for_stored_sentences(apps, None)

    load.refresh_from_db()
    assert load.reasons == [
        {"code": "gate.load_test.no_result", "params": {"models": "phi-3-mini, chat"}}
    ]
    assert load.summary_reason == load.reasons[0]  # the same sentence: the code stands for it
    assert "reason_codes" not in load.numbers
    assert (
        render_in(load.summary_reason, "zh-hans") == "没有联合压测：请同时压测 phi-3-mini, chat。"
    )
    engine.refresh_from_db()
    assert engine.reasons[0]["params"]["names"] == ["chat", "code"]
    assert render_in(engine.reasons[0], "en").startswith("h:0: chat, code size their memory")
    assert "reasons" not in engine.evidence
    kv.refresh_from_db()
    assert kv.reasons == [{"code": "legacy_text", "params": {"text": "A sentence."}}]
    assert kv.summary_reason == {"code": "gate.kv.no_reservation", "params": {}}
    assert render_in(kv.summary_reason, "zh-hans") == "没有 KV 预留。"
    assert render_in(kv.reasons[0], "zh-hans") == "A sentence."  # unknown: as it was
