import pytest
from hypothesis import given
from hypothesis import strategies as st

from inventory.analytics.kv import (
    UnknownDtypeError,
    bytes_per_element,
    kv_bytes_per_token,
    kv_reservation_bytes,
    kv_reservation_gap_bytes,
    recommended_kv_reservation_bytes,
)


def test_mla_caches_one_latent_per_layer_without_factor_two():
    # DeepSeek-V3: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64, bf16 (2 bytes).
    per_token = kv_bytes_per_token(
        61, 128, 128, "bf16", mla=True, kv_lora_rank=512, qk_rope_head_dim=64
    )
    assert per_token == 61 * (512 + 64) * 2 == 70_272


def test_standard_attention_stores_key_and_value_per_kv_head():
    # Llama-3-70B-like: 80 layers, 8 KV heads of 128, bf16 -> 2 * 80 * 8 * 128 * 2.
    assert kv_bytes_per_token(80, 8, 128, "bf16") == 327_680
    assert kv_bytes_per_token(80, 8, 128, 2) == 327_680
    # Tensor parallel 4 leaves 2 KV heads on each card.
    assert kv_bytes_per_token(80, 2, 128, "bf16") == 327_680 / 4


@pytest.mark.parametrize(
    ("name", "size"),
    [("fp32", 4), ("BF16", 2), ("fp16", 2), ("fp8_e4m3", 1), ("fp8-e5m2", 1), ("int8", 1)],
)
def test_dtype_names(name, size):
    assert bytes_per_element(name) == size


def test_int4_is_half_a_byte():
    assert bytes_per_element("int4") == 0.5
    assert kv_bytes_per_token(32, 8, 128, "int4") == 2 * 32 * 8 * 128 / 2


def test_unknown_dtype_names_itself_and_the_known_ones():
    with pytest.raises(UnknownDtypeError, match=r"'fp6'.*bf16"):
        kv_bytes_per_token(32, 8, 128, "fp6")


def test_mla_without_latent_dimensions_is_an_error():
    with pytest.raises(ValueError, match="kv_lora_rank"):
        kv_bytes_per_token(61, 1, 1, "bf16", mla=True)


def test_reservation_multiplies_out_exactly_with_a_decimal_buffer():
    # 10 requests x 1000 tokens x 100 B x 1.2; a float 1.2 would give 1_200_000.0000000002.
    assert kv_reservation_bytes(10, 1000, 100, 0.2) == 1_200_000
    assert kv_reservation_bytes(10, 1000, 100, 0.15) == 1_150_000
    assert kv_reservation_bytes(1, 1, 1, 0.15) == 2  # 1.15 bytes rounds up


@pytest.mark.parametrize("buffer", [-0.01, 1.01])
def test_reservation_rejects_insane_buffers(buffer):
    with pytest.raises(ValueError, match="buffer"):
        kv_reservation_bytes(10, 1000, 100, buffer)


@given(
    st.integers(0, 512),
    st.integers(1, 131072),
    st.integers(1, 400_000),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_reservation_grows_with_buffer_and_covers_the_unbuffered_need(c, t, b, x, y):
    low, high = sorted((x, y))
    assert c * t * b <= kv_reservation_bytes(c, t, b, low) <= kv_reservation_bytes(c, t, b, high)


def test_recommended_reservation_rounds_concurrency_up_to_whole_requests():
    # 12.4 requests need 13: 13 x 1,000 tokens x 1,000 B x 1.2, exactly.
    assert recommended_kv_reservation_bytes(12.4, 1000, 1000, 0.2) == 15_600_000
    # Float noise is no request: 12.000000000000002 stays 12.
    assert recommended_kv_reservation_bytes(12.000000000000002, 1000, 1000, 0.2) == 14_400_000


def test_gap_is_positive_when_under_reserved():
    assert kv_reservation_gap_bytes(15_600_000, 10_000_000) == 5_600_000
    assert kv_reservation_gap_bytes(10_000_000, 15_600_000) == -5_600_000
