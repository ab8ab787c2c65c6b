import pytest

from inventory.analytics.kv import KvShape
from inventory.analytics.kv_advisor import (
    AdmissionPolicy,
    KvDemandSample,
    KvFlag,
    SizingBasis,
    advise_kv_reservation,
    advise_kv_reservation_from_peaks,
)
from inventory.analytics.reasons import render
from inventory.analytics.units import GiB

HOUR = 3600.0
TOKENS = 4096
PER_TOKEN = 327_680  # 4096 tokens x 327,680 B = 1.25 GiB per request
REQUEST = 1.25 * GiB

# Running requests 1..19 and one burst of 40: mean 11.5, P95 = 19 + 0.05 * (40 - 19) = 20.05.
HISTORY = [KvDemandSample(i * HOUR, running) for i, running in enumerate([*range(1, 20), 40])]


def advise(samples=HISTORY, **overrides):
    options = {
        "current_reservation_bytes": int(40 * GiB),
        "bytes_per_token": PER_TOKEN,
        "tokens_per_request": TOKENS,
        "admission_policy": AdmissionPolicy.QUEUE,
    } | overrides
    return advise_kv_reservation("chat", samples, **options)


def test_recommendation_is_p95_whole_requests_times_request_size_plus_buffer():
    advice = advise()
    assert advice.mean_concurrency == pytest.approx(11.5)
    assert advice.p95_concurrency == pytest.approx(20.05)
    assert advice.peak_concurrency == 40
    # 20.05 rounds up to 21 requests: 21 x 1.25 GiB x 1.20 = 31.5 GiB.
    assert advice.recommended_bytes == int(21 * 1.25 * 1.2 * GiB)
    assert advice.mean_need_bytes == int(11.5 * REQUEST)
    assert advice.p95_need_bytes == pytest.approx(20.05 * REQUEST, abs=1)
    assert advice.explanations[0].code == "kv_advice.sizing"
    assert advice.explanations[0].params["requests"] == 21
    assert "31.5 GiB recommended" in render(advice.explanations[0])


def test_peak_sizing_and_the_buffer_are_options():
    assert advise(sizing=SizingBasis.PEAK).recommended_bytes == int(40 * 1.2 * REQUEST)
    assert advise(buffer=0.15).recommended_bytes == int(21 * 1.15 * REQUEST)


def test_reservation_at_the_mean_is_flagged():
    advice = advise(current_reservation_bytes=int(11.5 * REQUEST))
    assert KvFlag.RESERVED_AT_MEAN in advice.flags
    assert "kv_advice.mean_level" in [line.code for line in advice.explanations]


def test_reservation_just_below_the_p95_need_is_flagged_too():
    # 20 requests' worth is far above the mean (x1.74) but under the P95 need of 20.05.
    assert KvFlag.RESERVED_AT_MEAN in advise(current_reservation_bytes=int(20 * REQUEST)).flags


def test_p95_reservation_with_buffer_is_not_at_the_mean():
    advice = advise(current_reservation_bytes=int(21 * 1.2 * REQUEST))
    assert KvFlag.RESERVED_AT_MEAN not in advice.flags
    assert advice.flags == frozenset({KvFlag.RESERVATION_EXCEEDED})  # the 40-request burst


def test_exceeded_counts_distinct_excursions_not_samples():
    running = [2, 2, 8, 9, 2, 2, 7, 2, 8, 8, 8, 2]  # above 5: [8, 9], [7], [8, 8, 8]
    samples = [KvDemandSample(i * HOUR, r) for i, r in enumerate(running)]
    advice = advise(samples, current_reservation_bytes=int(5 * REQUEST))
    assert advice.excursions_in_window == 3
    assert KvFlag.RESERVATION_EXCEEDED in advice.flags
    assert advice.window_peak_demand_bytes == pytest.approx(9 * REQUEST)
    assert any("3 times in the last 7 days" in render(line) for line in advice.explanations)


def test_excursions_older_than_the_window_are_not_counted():
    old_burst = KvDemandSample(-8 * 24 * HOUR, 30)
    quiet = [KvDemandSample(i * HOUR, 2) for i in range(24)]
    advice = advise([old_burst, *quiet], current_reservation_bytes=int(5 * REQUEST))
    assert advice.excursions_in_window == 0
    assert KvFlag.RESERVATION_EXCEEDED not in advice.flags
    assert (
        advise(
            [old_burst, *quiet], current_reservation_bytes=int(5 * REQUEST), window_s=9 * 24 * HOUR
        ).excursions_in_window
        == 1
    )


def test_missing_admission_policy_is_flagged():
    advice = advise(admission_policy=None)
    assert KvFlag.NO_ADMISSION_POLICY in advice.flags
    assert KvFlag.NO_ADMISSION_POLICY not in advise().flags


def test_buffer_outside_policy_is_computed_but_flagged():
    assert KvFlag.BUFFER_OUTSIDE_POLICY in advise(buffer=0.30).flags
    assert KvFlag.BUFFER_OUTSIDE_POLICY in advise(buffer=0.10).flags
    assert KvFlag.BUFFER_OUTSIDE_POLICY not in advise(buffer=0.15).flags
    with pytest.raises(ValueError, match="buffer"):
        advise(buffer=1.5)


def test_tokens_in_use_drive_the_request_size_and_the_excursions():
    # 4 requests in every sample, 1000 tokens each except one sample of 3000 each.
    samples = [KvDemandSample(i * HOUR, 4, 4000) for i in range(19)]
    samples.append(KvDemandSample(19 * HOUR, 4, 12000))
    advice = advise(
        samples, tokens_per_request=None, bytes_per_token=100, current_reservation_bytes=1_000_000
    )
    # Per-request P95 = 1000 + 0.05 * (3000 - 1000).
    assert advice.tokens_per_request == pytest.approx(1100)
    assert advice.p95_tokens_in_use == pytest.approx(4000 + 0.05 * 8000)
    assert advice.peak_tokens_in_use == 12000
    # 12,000 tokens x 100 B = 1.2 MB > 1 MB, although 4 x 1100 x 100 B would not be.
    assert advice.excursions_in_window == 1


def test_request_size_must_come_from_somewhere():
    with pytest.raises(ValueError, match="tokens_per_request"):
        advise(tokens_per_request=None)
    with pytest.raises(ValueError):
        advise([])


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"sizing": SizingBasis.PEAK, "buffer": 0.3, "admission_policy": None},
        {"current_reservation_bytes": int(60 * REQUEST), "mean_tolerance": 0.5},
        {"shape": KvShape(layers=80, kv_heads=8, head_dim=128, dtype_bytes=2), "tensor_parallel": 4,
         "pipeline_parallel": 2},
    ],
)  # fmt: skip
def test_the_advice_from_peaks_alone_is_the_advice_from_the_timed_samples(options):
    # A week of minutes with fractions, ties and bursts, handed over out of order: the peaks
    # form gets them oldest first, as the database sorts them.
    running = [(m * 37 % 101) / 7 + (60 if m % 500 < 9 else 0) for m in range(10_080)]
    samples = [KvDemandSample((m + 1) * 60.0, r) for m, r in enumerate(running)]
    now = len(running) * 60.0
    timed = advise(samples[::-1], now=now, **options)
    options = {"admission_policy": AdmissionPolicy.QUEUE} | options
    peaks = advise_kv_reservation_from_peaks(
        "chat", running, bytes_per_token=PER_TOKEN, tokens_per_request=TOKENS,
        **{"current_reservation_bytes": int(40 * GiB)} | options,
    )  # fmt: skip
    assert peaks == timed
    assert timed.excursions_in_window > 1  # the bursts, so the excursion count is compared too
    with pytest.raises(ValueError):
        advise_kv_reservation_from_peaks(
            "chat", [], current_reservation_bytes=1, bytes_per_token=1, tokens_per_request=1
        )
