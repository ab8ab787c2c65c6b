"""The pure decisions: degradation order, MPS restart backoff and cap, the off-peak planner."""

import datetime as dt

from console.operations.decisions import defrag, mps
from console.operations.decisions.degradation import (
    EVICT,
    REFUSE,
    SHRINK_KV,
    Card,
    Policy,
    Tenant,
    decide,
)

GIB = 1024**3


def _card(used_gib, *tenants):
    return Card(80 * GIB, int(used_gib * GIB), tenants)


def _tenant(pk, priority, used_gib, kv_gib, cards=1):
    return Tenant(pk, f"d{pk}", priority, int(used_gib * GIB), int(kv_gib * GIB), cards)


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
