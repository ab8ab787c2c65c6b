"""Off-peak reloads: the traffic trough of a host and the reloads that fit in it.

From 30 days of hourly history per host:
- the trough: the load profile by weekday and hour (168 slots, a mean over the weeks seen),
  and the start in the next seven days whose window of `window_hours` has the least load;
- the candidates: deployments on a card whose fragmentation index climbs (least-squares slope
  of its daily peaks) or stands at the red line, or whose allocator holds a reserve (reserved
  minus allocated) above a share of the card; a reload gives that reserve back;
- the schedule: one deployment at a time, largest reserve first, each given `reload_minutes`,
  so two tenants of one card never reload together; what does not fit waits for the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

HOUR = 3600
WEEK_HOURS = 168


@dataclass(frozen=True, slots=True)
class CardHistory:
    gpu_id: int
    total_bytes: int
    fragmentation_daily_peaks: tuple[float | None, ...]  # oldest first, one per day


@dataclass(frozen=True, slots=True)
class Resident:
    deployment_id: int
    runtime_name: str
    gpu_ids: tuple[int, ...]
    reserve_bytes: int  # reserved minus allocated, over all its cards, now


@dataclass(frozen=True, slots=True)
class HostHistory:
    host_id: int
    weekly_load: tuple[float | None, ...]  # 168 slots from Monday 00:00 UTC (weekly_profile)
    cards: tuple[CardHistory, ...]
    residents: tuple[Resident, ...]


@dataclass(frozen=True, slots=True)
class Thresholds:
    window_hours: int = 2
    fragmentation_slope_per_day: float = 0.01
    fragmentation_index: float = 0.5
    reserve_fraction: float = 0.03  # of the card's memory
    reload_minutes: float = 10.0
    lead_s: float = 900.0  # leave an approver this long before the window opens


@dataclass(frozen=True, slots=True)
class PlannedReload:
    deployment_id: int
    runtime_name: str
    gpu_id: int
    order: int
    not_before: float
    reason: str  # fragmentation_trend, fragmentation_index or allocator_reserve
    estimated_bytes: int
    fragmentation_slope: float | None


@dataclass(frozen=True, slots=True)
class HostPlan:
    host_id: int
    window_start: float
    window_end: float
    trough_load: float
    reloads: tuple[PlannedReload, ...]
    deferred: tuple[int, ...]  # deployment ids that did not fit in this window

    @property
    def estimated_bytes(self) -> int:
        return sum(r.estimated_bytes for r in self.reloads)


def weekly_profile(hourly_load) -> tuple[float | None, ...]:
    """Mean load per hour of the week (0 = Monday 00:00 UTC) from (hour start, load) pairs;
    None where nothing was seen. (The console reads the same from SQL in one pass.)"""
    sums = [0.0] * WEEK_HOURS
    counts = [0] * WEEK_HOURS
    for start, load in hourly_load:
        # 1970-01-01 was a Thursday: shift so that slot 0 is Monday 00:00.
        slot = (int(start // HOUR) + 72) % WEEK_HOURS
        sums[slot] += load
        counts[slot] += 1
    return tuple(s / c if c else None for s, c in zip(sums, counts, strict=True))


def quietest_window(profile: list[float | None], now: float, hours: int, lead_s: float):
    """(start epoch, load) of the quietest `hours` window starting in the next week."""
    known = [v for v in profile if v is not None]
    fill = max(known) if known else 0.0  # an unseen hour counts as busy
    values = [fill if v is None else v for v in profile]
    first_hour = int(-(-(now + lead_s) // HOUR))
    best = None
    for hour in range(first_hour, first_hour + WEEK_HOURS):
        slot = (hour + 72) % WEEK_HOURS
        load = sum(values[(slot + k) % WEEK_HOURS] for k in range(hours))
        if best is None or load < best[1] - 1e-12:
            best = (hour * HOUR, load)
    return best


def slope(values) -> float | None:
    """Least-squares slope per step of the values that are not None (None below 3 points)."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    n = len(points)
    if n < 3:
        return None
    mean_x = sum(p[0] for p in points) / n
    mean_y = sum(p[1] for p in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var


def _card_reason(card: CardHistory, thresholds: Thresholds) -> tuple[str | None, float | None]:
    trend = slope(card.fragmentation_daily_peaks)
    latest = next((v for v in reversed(card.fragmentation_daily_peaks) if v is not None), None)
    if trend is not None and trend >= thresholds.fragmentation_slope_per_day:
        return "fragmentation_trend", trend
    if latest is not None and latest >= thresholds.fragmentation_index:
        return "fragmentation_index", trend
    return None, trend


def plan_host(history: HostHistory, now: float, thresholds: Thresholds = Thresholds()) -> HostPlan:
    start, load = quietest_window(
        list(history.weekly_load), now, thresholds.window_hours, thresholds.lead_s
    )
    end = start + thresholds.window_hours * HOUR
    cards = {card.gpu_id: card for card in history.cards}
    reasons = {gpu_id: _card_reason(card, thresholds) for gpu_id, card in cards.items()}
    candidates = []
    for resident in history.residents:
        on = [g for g in resident.gpu_ids if g in cards]
        if not on:
            continue
        total = sum(cards[g].total_bytes for g in on)
        reason, gpu_id, trend = None, on[0], None
        for g in on:
            card_reason, card_trend = reasons[g]
            if card_reason is not None:
                reason, gpu_id, trend = card_reason, g, card_trend
                break
        if reason is None and resident.reserve_bytes >= thresholds.reserve_fraction * total:
            reason = "allocator_reserve"
        if reason is not None:
            candidates.append((resident, gpu_id, reason, trend))
    candidates.sort(key=lambda c: (-c[0].reserve_bytes, c[0].deployment_id))
    step = thresholds.reload_minutes * 60.0
    fits = max(0, int(thresholds.window_hours * HOUR // step))
    reloads = tuple(
        PlannedReload(
            resident.deployment_id,
            resident.runtime_name,
            gpu_id,
            order,
            start + order * step,
            reason,
            max(0, resident.reserve_bytes),
            trend,
        )
        for order, (resident, gpu_id, reason, trend) in enumerate(candidates[:fits])
    )
    deferred = tuple(c[0].deployment_id for c in candidates[fits:])
    return HostPlan(history.host_id, start, end, load, reloads, deferred)
