"""The pure decisions: degradation order, MPS restart backoff and cap, the off-peak planner."""

import datetime as dt
import math
from fractions import Fraction

import pytest

from console.operations.decisions import defrag, mps
from console.operations.decisions.degradation import (
    EVICT,
    REFUSE,
    SHRINK_KV,
    Card,
    Policy,
    Tenant,
    decide,
    recovered,
)
from inventory.analytics.kv import KvShape, kv_bytes_per_token_per_card, kv_reservation_per_card

GIB = 1024**3


def _card(used_gib, *tenants):
    return Card(80 * GIB, int(used_gib * GIB), tenants)


def _tenant(pk, priority, used_gib, kv_gib, cards=1, **more):
    """An on-demand tenant unless an engine is named: what it holds counts against the
    limit of the whole card, as NVML alone would judge it."""
    share = more.pop("share", Fraction(1, cards))
    more.setdefault("engine", "ollama")
    return Tenant(pk, f"d{pk}", priority, int(used_gib * GIB), int(kv_gib * GIB), share, **more)


def test_a_card_within_its_limit_gets_no_plan():
    plan = decide(_card(70, _tenant(1, 1, 40, 10), _tenant(2, 3, 30, 10)))
    assert not plan.over_limit and plan.steps == ()


def test_the_lowest_priority_tenant_is_shrunk_first_when_that_is_enough():
    plan = decide(_card(77, _tenant(1, 1, 40, 10), _tenant(2, 3, 37, 16)))
    assert [s.kind for s in plan.steps] == [SHRINK_KV]
    step = plan.steps[0]
    assert step.deployment_id == 2  # priority 3 is the least important
    assert step.kv_to_bytes == 8 * GIB  # the floor: half its reservation
    assert plan.projected_bytes <= plan.target_bytes


def test_shrinking_spreads_over_a_tensor_parallel_group():
    plan = decide(_card(76, _tenant(1, 1, 40, 10), _tenant(2, 3, 36, 32, cards=4)))
    assert plan.steps[0].frees_bytes == 4 * GIB  # 16 GiB given up over 4 cards
    assert plan.steps[0].kv_to_bytes == 16 * GIB and plan.steps[0].kv_to_per_card_bytes == 4 * GIB


# The three shapes of the issue: TP=1, TP=4 with grouped-query attention (Llama 3 70B: 80
# layers, 8 KV heads of 128, bf16), TP=8 with MLA (DeepSeek-V3: 61 layers, latent 512 + rope
# 64, bf16: every card holds the whole cache).
LLAMA_70B = KvShape(80, 8, 128, 2)
DEEPSEEK_V3 = KvShape(61, 1, 128, 2, mla=True, kv_lora_rank=512, qk_rope_head_dim=64)
SHAPES = {
    "tp1": (LLAMA_70B, 1),
    "tp4-gqa": (LLAMA_70B, 4),
    "tp8-mla": (DEEPSEEK_V3, 8),
}


def _shrunk(engine, shape, tp, kv_gib=40, weights_gib=16):
    share = Fraction(str(kv_bytes_per_token_per_card(shape, tp))) / Fraction(
        str(shape.bytes_per_token())
    )
    per_card = kv_reservation_per_card(int(kv_gib * GIB), shape, tp).bytes
    used = weights_gib + per_card / GIB + 4  # weights, KV pool, activations and context
    tenant = _tenant(2, 3, used, kv_gib, share=share, engine=engine,
                     weights_per_card_bytes=int(weights_gib * GIB))  # fmt: skip
    # The engine preallocates: the on-demand neighbour and half a GiB no tenant owns fill
    # what it leaves past the limit.
    plan = decide(_card(79.5, _tenant(1, 1, 79 - used, 1), tenant))
    (step,) = [s for s in plan.steps if s.kind == SHRINK_KV]
    return step, per_card


@pytest.mark.parametrize("name", SHAPES)
def test_a_vllm_shrink_sends_the_kv_pool_of_each_gpu_never_the_whole_reservation(name):
    shape, tp = SHAPES[name]
    step, before = _shrunk("vllm", shape, tp)
    after = kv_reservation_per_card(step.kv_to_bytes, shape, tp).bytes
    # --kv-cache-memory-bytes is per GPU: the ledger's per-card figure, smaller than before.
    assert step.reload == {"kv_bytes": after} and after < before
    assert step.frees_bytes == before - after
    if name == "tp4-gqa":
        assert after == step.kv_to_bytes // 4  # 8 KV heads over 4 cards: a quarter each
    if name == "tp8-mla":
        assert after == step.kv_to_bytes  # MLA: the whole latent cache on every card


@pytest.mark.parametrize("engine", ["sglang", "tgi"])
@pytest.mark.parametrize("name", SHAPES)
def test_sglang_and_tgi_shrink_by_a_memory_fraction_of_each_gpu(engine, name):
    shape, tp = SHAPES[name]
    step, before = _shrunk(engine, shape, tp)
    after = kv_reservation_per_card(step.kv_to_bytes, shape, tp).bytes
    (fraction,) = step.reload.values()
    assert list(step.reload) == ["mem_fraction"]
    if engine == "sglang":  # --mem-fraction-static: weights and the KV pool of one GPU
        assert fraction == math.floor((16 * GIB + after) * 1000 / (80 * GIB)) / 1000
    else:  # --cuda-memory-fraction: all the process holds on one GPU after the shrink
        held = int((16 + before / GIB + 4) * GIB) - step.frees_bytes
        assert fraction == math.floor(held * 1000 / (80 * GIB)) / 1000
    assert 0.05 <= fraction < (16 * GIB + before + 4 * GIB) / (80 * GIB)


def test_when_shrinking_is_not_enough_the_lowest_priority_tenant_is_evicted():
    plan = decide(_card(78, _tenant(1, 1, 60, 10), _tenant(2, 3, 18, 2)))
    assert [(s.kind, s.deployment_id) for s in plan.steps] == [(EVICT, 2)]
    assert plan.projected_bytes == 60 * GIB


def test_the_most_important_model_is_never_evicted_and_the_card_refuses_new_loads():
    plan = decide(_card(78, _tenant(1, 1, 40, 1), _tenant(2, 1, 38, 1)))
    assert [s.kind for s in plan.steps][-1] == REFUSE
    assert EVICT not in [s.kind for s in plan.steps]


def test_without_eviction_allowed_the_plan_shrinks_and_refuses():
    plan = decide(_card(78, _tenant(1, 1, 60, 10), _tenant(2, 3, 18, 2)), Policy(allow_evict=False))
    assert [s.kind for s in plan.steps] == [SHRINK_KV, REFUSE]


def test_preallocating_engines_at_their_settings_are_not_over_the_limit():
    # vLLM and SGLang took 97% of the card at start; nothing on demand uses what they leave.
    card = _card(78, _tenant(1, 1, 40, 10, engine="vllm"), _tenant(2, 3, 38, 10, engine="sglang"))
    plan = decide(card)
    assert not plan.over_limit and plan.steps == ()
    assert plan.preallocated_bytes == 78 * GIB
    assert plan.limit_bytes == 78 * GIB + int(0.95 * 2 * GIB)


def test_an_on_demand_surge_beside_preallocated_pools_shrinks_the_lowest_priority_pool():
    # Two vLLM pools hold 60 GiB; a job no tenant owns takes 19.5 of the 20 GiB they leave.
    card = _card(79.5, _tenant(1, 1, 30, 10, engine="vllm"), _tenant(2, 3, 30, 16, engine="vllm"))
    plan = decide(card)
    assert plan.over_limit and [s.kind for s in plan.steps] == [SHRINK_KV]
    (step,) = plan.steps
    # 8 GiB of the pool go to the on-demand part: 19.5 of 28 GiB is below 95% again.
    assert step.deployment_id == 2 and step.frees_bytes == 8 * GIB
    assert plan.projected_bytes == int(71.5 * GIB)


def test_an_on_demand_surge_that_a_shrink_cannot_cover_evicts_and_then_refuses():
    # The pools leave 4 GiB and a job takes all of it; halving the low-priority pool's small
    # reservation frees 0.1 GiB (4 of 4.1 GiB on demand: still over), so it is evicted.
    card = _card(80, _tenant(1, 1, 60, 10, engine="vllm"), _tenant(2, 3, 16, 0.2, engine="vllm"))
    plan = decide(card)
    assert [(s.kind, s.deployment_id) for s in plan.steps] == [(EVICT, 2)]
    # 4 GiB on demand of the 20 the remaining pool leaves: within the limit, no refusal.
    assert plan.projected_bytes == 64 * GIB


def test_recovery_is_judged_on_the_on_demand_part():
    pools = (_tenant(1, 1, 40, 10, engine="vllm"), _tenant(2, 3, 38, 10, engine="tgi"))
    assert recovered(_card(79, *pools), 0.95)  # 1 of the 2 GiB they leave
    assert not recovered(_card(79.95, *pools), 0.95)
    on_demand = (_tenant(1, 1, 40, 10), _tenant(2, 3, 38, 10))
    assert not recovered(_card(79, *on_demand), 0.95)  # 79 of 80: NVML's own rule


def test_mps_restarts_back_off_and_stop_at_the_hourly_cap():
    policy = mps.RestartPolicy(first_delay_s=5, backoff_factor=2, max_per_hour=3)
    assert mps.next_attempt(1000.0, 0, [], 1000.0, policy) == 1005.0
    assert mps.next_attempt(1000.0, 1, [1005.0], 1006.0, policy) == 1015.0
    assert mps.next_attempt(1000.0, 2, [1005.0, 1015.0], 1016.0, policy) == 1035.0
    assert mps.next_attempt(1000.0, 3, [1005.0, 1015.0, 1035.0], 1040.0, policy) is None
    assert mps.next_attempt(1000.0, 3, [1005.0, 1015.0, 1035.0], 4700.0, policy) is not None


def test_a_client_is_back_when_its_deployment_has_a_new_pid():
    back = mps.clients_returned(["a", "b"], {"a": [101], "b": [200]}, {"a": 100, "b": 200})
    assert back == {"a": 101}


MONDAY = dt.datetime(2026, 11, 2, tzinfo=dt.UTC).timestamp()


def _history(days=30, quiet_hour=3, drift=0.02, reserve=0):
    loads = []
    start = MONDAY - days * 86400
    for hour in range(days * 24):
        at = start + hour * 3600
        weekday = dt.datetime.fromtimestamp(at, dt.UTC).weekday()
        hour_of_day = hour % 24
        quiet = hour_of_day in (quiet_hour, quiet_hour + 1) and weekday == 6
        loads.append((at, 5.0 if quiet else 50.0 + hour_of_day))
    peaks = tuple(0.1 + drift * d for d in range(days))
    cards = (defrag.CardHistory(1, 80 * GIB, peaks), defrag.CardHistory(2, 80 * GIB, (0.1,) * days))
    residents = (
        defrag.Resident(10, "a", (1,), 2 * GIB),
        defrag.Resident(11, "b", (1,), 1 * GIB),
        defrag.Resident(12, "c", (2,), reserve),
    )
    return defrag.HostHistory(7, defrag.weekly_profile(loads), cards, residents)


def test_the_planner_finds_the_weekly_trough_and_schedules_one_reload_at_a_time():
    plan = defrag.plan_host(_history(), MONDAY)
    start = dt.datetime.fromtimestamp(plan.window_start, dt.UTC)
    assert (start.weekday(), start.hour) == (6, 3)  # Sunday 03:00, the quiet hours seen
    assert [r.deployment_id for r in plan.reloads] == [10, 11]  # largest reserve first
    assert {r.reason for r in plan.reloads} == {"fragmentation_trend"}
    starts = [r.not_before for r in plan.reloads]
    assert starts[1] - starts[0] == 600  # never two tenants of one card together
    assert plan.estimated_bytes == 3 * GIB


def test_a_card_with_a_large_allocator_reserve_is_reloaded_even_without_a_trend():
    plan = defrag.plan_host(_history(drift=0.0, reserve=4 * GIB), MONDAY)
    assert [(r.deployment_id, r.reason) for r in plan.reloads] == [(12, "allocator_reserve")]


def test_what_does_not_fit_in_the_window_is_deferred():
    thresholds = defrag.Thresholds(window_hours=1, reload_minutes=45)
    plan = defrag.plan_host(_history(), MONDAY, thresholds)
    assert [r.deployment_id for r in plan.reloads] == [10]
    assert plan.deferred == (11,)
