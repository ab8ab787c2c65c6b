"""Gate 5: the engines' own memory settings on each card leave room for each other."""

import re
from pathlib import Path

import pytest
from django.utils import timezone

from console.proposals.gate_checks import check, check_engine_settings
from console.proposals.gates import Gate, GateStatus
from console.proposals.gates.engine_settings import (
    CardEngines,
    EngineSettingsRequest,
    engine_claim,
    evaluate_engine_settings,
    vllm_default_utilization,
)
from inventory.analytics.reasons import Reason
from inventory.models import Deployment
from tests.console.proposals.support import codes_of, create_proposal, english, seed_host
from tests.factories import GIB, ServedModelFactory

CARD = 80 * GIB
VLLM_CACHE_CONFIG = Path(__file__).resolve().parents[2] / "fixtures/engines/vllm-cache-config"
HEADROOM = 4 * GIB  # 5% of the card: the limit is 95%


def claim(name, engine="vllm", **settings):
    return engine_claim(name, engine, total_bytes=CARD, **settings)


def evaluate(*claims, headroom=HEADROOM):
    return evaluate_engine_settings(
        EngineSettingsRequest("new", headroom, (CardEngines("h:0", CARD, claims),))
    )


def test_fractions_that_leave_the_headroom_pass():
    outcome = evaluate(
        claim("chat", memory_fraction=0.5),
        claim("embed", "tgi", memory_fraction=0.3, staggered=True),
    )
    assert outcome.status is GateStatus.PASS, outcome.summary
    (row,) = outcome.numbers["cards"]
    assert row["sum_fraction"] == pytest.approx(0.8)
    assert row["limit_fraction"] == pytest.approx(0.95)
    assert outcome.summary.code == "gate.engine_settings.fits"


def test_two_vllm_0_28_engines_at_the_default_take_184_percent_of_a_card():
    # vLLM 0.20-0.33's --gpu-memory-utilization defaults to 0.92 of the card, per instance.
    outcome = evaluate(
        claim("chat", version="0.28.0"), claim("code", version="0.28.0", staggered=True)
    )
    assert outcome.status is GateStatus.FAIL
    (reason,) = outcome.reasons
    assert reason.code == "gate.engine_settings.fractions_exceed"
    assert reason.params["total"] == pytest.approx(1.84)
    assert reason.params["claims"][0] == Reason(
        "gate.engine_settings.claim", {"name": "chat", "fraction": 0.92, "source": "vllm_default"}
    )
    assert english(reason).startswith("h:0: the engines' memory settings add up to 184%")
    assert outcome.runbook_slug == "engine-memory-settings"


def test_on_demand_engines_beside_pools_must_stay_below_the_alerts_share_of_what_is_left():
    def ollama(fraction):  # what Ollama holds at its peak, as a share of the card
        return claim("small", "ollama", context_kv_bytes=int(fraction * CARD) - 2 * GIB,
                     weights_bytes=GIB, overhead_bytes=GIB, staggered=True)  # fmt: skip

    # vLLM preallocates 0.5; Ollama may use up to 95% of the other half on demand: 0.475.
    # With 1 GiB of headroom both cards' fractions fit; only the second passes the alert.
    fits = evaluate(claim("chat", memory_fraction=0.5), ollama(0.475), headroom=GIB)
    assert fits.status is GateStatus.PASS, fits.reasons
    over = evaluate(claim("chat", memory_fraction=0.5), ollama(0.48), headroom=GIB)
    assert over.status is GateStatus.FAIL
    (reason,) = over.reasons
    assert reason.code == "gate.engine_settings.on_demand_over"
    assert reason.params["allowed"] == pytest.approx(0.475)
    assert english(reason) == (
        "h:0: the on-demand engines (small) claim 48.0% of the card; the preallocating "
        "engines leave 50%, and at their peak the on-demand part would pass the 95% memory "
        "limit (above 47.5% of the card)."
    )


def test_preallocating_engines_alone_are_judged_by_the_headroom_only():
    outcome = evaluate(claim("chat", memory_fraction=0.6),
                       claim("code", "sglang", memory_fraction=0.35, staggered=True))  # fmt: skip
    assert outcome.status is GateStatus.PASS, outcome.reasons


@pytest.mark.parametrize("excerpt", sorted(VLLM_CACHE_CONFIG.glob("vllm-*-cache.py.txt")))
def test_the_vllm_default_is_the_one_in_that_versions_source(excerpt):
    # tests/fixtures/engines/vllm-cache-config: the lines of vllm/config/cache.py, from the
    # PyPI wheels, that set CacheConfig.gpu_memory_utilization's default.
    version = excerpt.name.split("-")[1]
    text = excerpt.read_text()
    stated = re.search(r"gpu_memory_utilization: float = Field\(default=([0-9.]+)", text)
    if stated is None:  # 0.34 on: unset, resolved to 1.0 with the extensible KV cache ...
        assert "default=None" in text and "return 1.0" in text
        assert "enabled on CUDA and ROCm" in text  # ... which CUDA has unless told otherwise
        expected = 1.0
    else:
        expected = float(stated.group(1))
    assert vllm_default_utilization(version) == (expected, "vllm_default")
    assert claim("chat", version=version).fraction == expected


def test_a_vllm_of_no_stated_version_claims_what_the_newest_takes():
    assert claim("chat").fraction == 1.0 and claim("chat").source == "vllm_default_version_unstated"
    assert claim("chat", version="nightly").fraction == 1.0
    assert claim("chat", version="0.19.1").fraction == 0.9


def test_a_vllm_pool_in_bytes_claims_weights_pool_and_overhead():
    chat = claim("chat", kv_cache_bytes=20 * GIB, weights_bytes=16 * GIB, overhead_bytes=4 * GIB)
    assert chat.fraction == pytest.approx(0.5)
    assert chat.source == "kv_cache_memory_bytes"
    # A pool fixed in bytes does not depend on the free memory seen at start.
    assert not chat.sizes_from_free_memory


def test_sglang_without_its_fraction_is_unknown_and_fails():
    outcome = evaluate(claim("chat", "sglang"), claim("code", memory_fraction=0.3, staggered=True))
    assert codes_of(outcome.reasons) == ["gate.engine_settings.fraction_unknown"]
    assert outcome.reasons[0].params["setting"].code == "gate.engine_settings.setting.sglang"
    assert "--mem-fraction-static" in english(outcome.reasons[0])


def test_ollama_holds_its_weights_its_contexts_kv_and_its_overhead():
    chat = claim(
        "chat",
        "ollama",
        weights_bytes=8 * GIB,
        context_kv_bytes=4 * GIB,
        overhead_bytes=4 * GIB,
    )
    assert chat.fraction == pytest.approx(0.2)
    assert claim("chat", "ollama").fraction is None  # no context size stated


def test_engines_that_start_together_are_flagged_unless_staggered():
    together = evaluate(claim("chat", memory_fraction=0.4), claim("code", memory_fraction=0.4))
    assert together.status is GateStatus.FAIL
    (reason,) = together.reasons
    assert reason == Reason(
        "gate.engine_settings.simultaneous_start", {"card": "h:0", "names": ["chat", "code"]}
    )
    staggered = evaluate(
        claim("chat", memory_fraction=0.4), claim("code", memory_fraction=0.4, staggered=True)
    )
    assert staggered.status is GateStatus.PASS


@pytest.mark.django_db
def test_on_the_seed_host_a_default_vllm_beside_its_tenants_fails_by_card(personas):
    host = seed_host()
    busy = host.gpus.get(index=1)
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[busy],
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB),
        isolation_mode=Deployment.Isolation.TIME_SLICING,
    )
    outcome = check_engine_settings(proposal, [busy], timezone.now())
    assert outcome.status is GateStatus.FAIL
    (row,) = outcome.numbers["cards"]
    assert row["card"] == "a100-node:1"
    # The seed's three tenants at their own sizes (0.32 + 0.25 + 0.19) and the proposal at
    # the newest vLLM's default, the whole card (it states no version); it also starts with
    # the card's first engine.
    fractions = {c["name"]: c["fraction"] for c in row["claims"]}
    assert fractions["phi-3-mini"] == pytest.approx(1.0)
    assert sum(fractions.values()) == pytest.approx(0.32 + 0.25 + 0.19 + 1.0)
    assert set(codes_of(outcome.reasons)) == {
        "gate.engine_settings.fractions_exceed",
        "gate.engine_settings.simultaneous_start",
    }


@pytest.mark.django_db
def test_the_gate_runs_with_the_others_on_an_empty_card(personas):
    host = seed_host()
    empty = host.gpus.get(index=2)
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[empty],
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB),
        engine_memory_fraction=0.2,
    )
    outcomes = {outcome.gate: outcome for outcome in check(proposal).outcomes}
    assert outcomes[Gate.ENGINE_SETTINGS].status is GateStatus.PASS


@pytest.mark.django_db
def test_the_proposal_page_shows_each_cards_engines_and_their_sum(personas, client_as):
    from console.proposals.services import do_record_gate_results, do_start_checks, do_submit

    host = seed_host()
    busy = host.gpus.get(index=1)
    proposal = create_proposal(
        personas["oncall"],
        host=host,
        gpus=[busy],
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB),
        isolation_mode=Deployment.Isolation.TIME_SLICING,
    )
    do_submit(proposal, acting_user=personas["oncall"])
    do_start_checks(proposal.pk, 1)
    do_record_gate_results(proposal.pk, 1, check(proposal))
    page = client_as("oncall").get(f"/proposals/{proposal.pk}/").content.decode()
    assert 'data-testid="gate-engine_settings"' in page
    assert "phi-3-mini (vllm) 100%" in page and "vllm_default_version_unstated" in page
    assert "CUDA context" in page  # the memory gate's new column
