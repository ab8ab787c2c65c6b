"""The 95% rule's figure (inventory.analytics.memory_pressure): properties over any card."""

from hypothesis import given
from hypothesis import strategies as st

from inventory.analytics.memory_pressure import TenantMemory, card_pressure

GIB = 1024**3
totals = st.integers(min_value=GIB, max_value=200 * GIB)
limits = st.floats(min_value=0.5, max_value=1.0)
engines = st.sampled_from(["vllm", "sglang", "tgi", "ollama", "tei", "other"])


@st.composite
def cards(draw):
    total = draw(totals)
    reserved = draw(st.integers(min_value=0, max_value=total // 50))
    used = draw(st.integers(min_value=0, max_value=total - reserved))
    held = st.integers(min_value=0, max_value=used)
    tenants = draw(st.lists(st.builds(TenantMemory, st.just("t"), engines, held), max_size=4))
    return total, used, tenants, reserved


@given(cards(), limits)
def test_without_preallocating_tenants_it_is_nvmls_own_rule(card, limit):
    total, used, tenants, reserved = card
    on_demand = [t for t in tenants if t.engine not in {"vllm", "sglang", "tgi"}]
    pressure = card_pressure(total, used, on_demand, limit, reserved)
    assert pressure.preallocated_bytes == 0
    assert pressure.on_demand_over == (used > int(limit * (total - reserved)))


@given(cards(), limits)
def test_preallocated_pools_never_make_a_card_over_that_nvml_alone_would_not(card, limit):
    total, used, tenants, reserved = card
    pressure = card_pressure(total, used, tenants, limit, reserved)
    nvml_alone = card_pressure(total, used, [], limit, reserved)
    assert pressure.limit_bytes >= nvml_alone.limit_bytes
    assert not pressure.on_demand_over or nvml_alone.on_demand_over
    assert 0 <= pressure.preallocated_bytes <= used  # what the pools hold is part of used


def test_a_card_the_pools_fill_is_not_over_until_something_else_uses_memory():
    pools = [TenantMemory("a", "vllm", 50 * GIB), TenantMemory("b", "tgi", 30 * GIB)]
    assert not card_pressure(80 * GIB, 80 * GIB, pools, 0.95).on_demand_over
    # Process samples newer than the card's may hold more than it says is used: clamped.
    assert card_pressure(80 * GIB, 70 * GIB, pools, 0.95).preallocated_bytes == 70 * GIB
