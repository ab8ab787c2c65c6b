"""The pure part: alert states, and what crosses each kind of rule."""

import datetime as dt
from dataclasses import replace

from console.alerts.conditions import (
    CardFact,
    EventFact,
    FleetFact,
    HostFact,
    Scope,
    card_memory,
    collector_faults_rising,
    event,
    headroom_low,
    in_scope,
    silenced_by,
)
from console.alerts.default_rules import DEFAULT_RULES
from console.alerts.evaluation import Crossing, OpenAlert, State, Timing, repeat_due, step
from inventory.analytics.memory_pressure import TenantMemory
from inventory.telemetry.xid_events import XID_CATALOGUE, xid_class

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
GIB = 1024**3


def _crossing(fp="card_memory:h:0"):
    return Crossing(fp, {"Hostname": "h", "gpu": "0"}, {"used_fraction": 0.97})


def test_a_crossing_waits_for_its_duration_before_firing():
    timing = Timing(for_s=30, resolve_after_s=0)
    first = step(timing, {}, {"a": _crossing("a")}, T0)
    assert [c.fingerprint for c in first.start_pending] == ["a"] and not first.start_firing
    pending = {"a": OpenAlert("a", State.PENDING, T0, T0)}
    early = step(timing, pending, {"a": _crossing("a")}, T0 + dt.timedelta(seconds=29))
    assert not early.fire and [c.fingerprint for c in early.still] == ["a"]
    held = step(timing, pending, {"a": _crossing("a")}, T0 + dt.timedelta(seconds=30))
    assert [c.fingerprint for c in held.fire] == ["a"]


def test_a_pending_alert_that_clears_is_dropped_and_a_firing_one_waits_out_its_hysteresis():
    timing = Timing(for_s=30, resolve_after_s=60)
    assert step(timing, {"a": OpenAlert("a", State.PENDING, T0, T0)}, {}, T0).drop == ["a"]
    firing = {"a": OpenAlert("a", State.FIRING, T0, T0)}
    assert step(timing, firing, {}, T0 + dt.timedelta(seconds=59)).resolve == []
    assert step(timing, firing, {}, T0 + dt.timedelta(seconds=60)).resolve == ["a"]


def test_no_duration_fires_at_once_and_a_second_step_on_the_same_data_changes_nothing():
    timing = Timing(for_s=0, resolve_after_s=0)
    decided = step(timing, {}, {"a": _crossing("a")}, T0)
    assert [c.fingerprint for c in decided.start_firing] == ["a"]
    again = step(timing, {"a": OpenAlert("a", State.FIRING, T0, T0)}, {"a": _crossing("a")}, T0)
    assert not again.changed


def test_repeats_follow_the_interval_and_zero_means_never():
    assert repeat_due(None, 0, T0)
    assert not repeat_due(T0, 0, T0 + dt.timedelta(days=1))
    assert not repeat_due(T0, 600, T0 + dt.timedelta(seconds=599))
    assert repeat_due(T0, 600, T0 + dt.timedelta(seconds=600))


def _card(index, used, *, host="h", headroom=None, total=80 * GIB):
    return CardFact(1, host, {"rack": "r1"}, 10 + index, index, f"GPU-{index}", "NVIDIA H100",
                    total, used, None, 1, headroom)  # fmt: skip


def test_card_memory_crosses_strictly_above_the_share_with_dcgm_labels():
    facts = FleetFact(None, 0, cards=[_card(0, int(0.96 * 80 * GIB)), _card(1, 76 * GIB),
                                      _card(2, None)])  # fmt: skip
    (crossing,) = card_memory({"used_fraction": 0.95}, facts)
    assert crossing.labels == {"Hostname": "h", "host": "h", "gpu": "0", "UUID": "GPU-0",
                               "modelName": "NVIDIA H100"}  # fmt: skip
    assert crossing.values["used_fraction"] == 0.96 and crossing.gpu_id == 10
    assert card_memory({"used_fraction": 0.97}, facts) == []


def _tenants_card(used_gib, *tenants):
    return FleetFact(None, 0, cards=[replace(_card(0, int(used_gib * GIB)), tenant_memory=tenants)])


def test_preallocated_pools_at_their_settings_do_not_cross_the_share():
    # vLLM took 0.95 of the card at start, as gate 5 allows: NVML says 97% used, of which the
    # 1.6 GiB beside the pool are 40% of the 4 GiB it leaves.
    facts = _tenants_card(77.6, TenantMemory("chat", "vllm", 76 * GIB, kv_usage=0.4))
    assert card_memory({"used_fraction": 0.95}, facts) == []


def test_the_on_demand_part_crosses_at_the_share_of_what_the_pools_leave():
    pools = (TenantMemory("chat", "vllm", 40 * GIB), TenantMemory("code", "sglang", 20 * GIB))
    ollama = TenantMemory("small", "ollama", 15 * GIB)  # on demand: counted as used, not pool
    (crossing,) = card_memory({}, _tenants_card(79.1, *pools, ollama))  # 19.1 of 20 GiB
    assert crossing.values["reason"] == "on_demand"
    assert crossing.values["on_demand_fraction"] == 0.955
    assert crossing.values["preallocated_bytes"] == 60 * GIB
    assert crossing.values["limit_bytes"] == 60 * GIB + int(0.95 * 20 * GIB)
    assert card_memory({}, _tenants_card(78.9, *pools, ollama)) == []  # 18.9 of 20: 94.5%


def test_a_full_pool_crosses_only_while_its_engine_preempts_or_queues():
    full = TenantMemory("chat", "vllm", 70 * GIB, kv_usage=0.97, kv_pressure=True)
    (crossing,) = card_memory({}, _tenants_card(71, full))
    assert crossing.values["reason"] == "kv_pool" and crossing.values["full_pools"] == ["chat"]
    calm = replace(full, kv_pressure=False)  # a full pool that serves everything is healthy
    assert card_memory({}, _tenants_card(71, calm)) == []
    half = replace(full, kv_usage=0.6)  # preemptions with room in the pool: not the pool's
    assert card_memory({}, _tenants_card(71, half)) == []
    ollama = TenantMemory("small", "ollama", 70 * GIB, kv_usage=0.99, kv_pressure=True)
    assert card_memory({}, _tenants_card(71, ollama)) == []  # no pool of its own to fill


def test_headroom_is_the_best_cards():
    low = FleetFact(None, 0, cards=[_card(0, 1, headroom=GIB), _card(1, 1, headroom=3 * GIB)])
    (crossing,) = headroom_low({"min_gib": 4}, low)
    assert crossing.labels["gpu"] == "1" and crossing.values["headroom_gib"] == 3.0
    roomy = FleetFact(None, 0, cards=[_card(0, 1, headroom=GIB), _card(1, 1, headroom=9 * GIB)])
    assert headroom_low({"min_gib": 4}, roomy) == []


def _event(kind, xid=None, gpu=0, count=1):
    return EventFact(1, "h", {}, kind, 10 + gpu, gpu, f"GPU-{gpu}", "NVIDIA H100", None, "",
                     xid, count, T0)  # fmt: skip


def test_event_rules_group_per_card_and_xid_rules_keep_their_classes():
    facts = FleetFact(None, 0, events=[_event("oom", count=2), _event("oom", gpu=1),
                                       _event("xid", 79), _event("xid", 13)])  # fmt: skip
    ooms = event({"event_kind": "oom"}, facts)
    assert sorted((c.labels["gpu"], c.values["count"]) for c in ooms) == [("0", 2), ("1", 1)]
    (hardware,) = event({"event_kind": "xid", "xid_classes": ["hardware"]}, facts)
    assert hardware.labels["xid_class"] == "hardware" and hardware.values["xid"] == 79
    assert xid_class(63) == "memory" and xid_class(9999) == "other"


def test_each_xid_raises_the_alert_its_catalogue_action_calls_for():
    # NVIDIA's immediate action decides: a card to drain, reset or reboot is critical; one to
    # reset at the next drain, a warning; an application's fault or a notice, info.
    severity = {"drain": "critical", "reset_gpu": "critical", "reboot_node": "critical",
                "check_row_remapping": "warning", "restart_app": "info",
                "none": "info"}  # fmt: skip
    rules = [r for r in DEFAULT_RULES if r[7].get("event_kind") == "xid"]
    for code, info in XID_CATALOGUE.items():
        facts = FleetFact(None, 0, events=[_event("xid", code)])
        raised = [rule[3] for rule in rules if event(rule[7], facts)]
        assert raised == [severity[info.action]], code
    unknown = FleetFact(None, 0, events=[_event("xid", 9)])  # outside the catalogue
    assert [rule[3] for rule in rules if event(rule[7], unknown)] == ["info"]
    for code in (140, 154, 109, 48, 95):
        assert xid_class(code) == "hardware", code


def test_faults_rise_only_above_the_window_before():
    def host(recent, before):
        return HostFact(1, "h", {}, 1.0, recent, before)

    facts = FleetFact(None, 0, hosts=[host(5, 1)])
    assert len(collector_faults_rising({"min_faults": 3}, facts)) == 1
    assert collector_faults_rising({"min_faults": 3}, FleetFact(None, 0, hosts=[host(5, 5)])) == []


def test_scopes_and_silences():
    crossing = card_memory({}, FleetFact(None, 0, cards=[_card(0, 79 * GIB)]))[0]
    assert in_scope(Scope("fleet"), crossing)
    assert in_scope(Scope("host", host_id=1), crossing)
    assert not in_scope(Scope("host", host_id=2), crossing)
    assert in_scope(Scope("host_label", label="rack=r1"), crossing)
    assert not in_scope(Scope("host_label", label="rack=r2"), crossing)
    assert silenced_by({"Hostname": "h"}, crossing.labels)
    assert not silenced_by({"Hostname": "h", "gpu": "3"}, crossing.labels)
    assert not silenced_by({}, crossing.labels)
