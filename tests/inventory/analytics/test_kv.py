import pytest
from hypothesis import given
from hypothesis import strategies as st

from inventory.analytics.kv import (
    KvShape,
    UnknownDtypeError,
    bytes_per_element,
    kv_bytes_per_token,
    kv_bytes_per_token_per_card,
    kv_reservation_bytes,
    kv_reservation_gap_bytes,
    kv_reservation_per_card,
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


# Worked numbers from the models' published config.json files (Hugging Face):
# - DeepSeek-V3: num_hidden_layers 61, kv_lora_rank 512, qk_rope_head_dim 64 (MLA).
# - Meta-Llama-3-70B: num_hidden_layers 80, num_key_value_heads 8, hidden_size 8192 over
#   num_attention_heads 64 = head dim 128.
# - Qwen2-7B: num_hidden_layers 28, num_key_value_heads 4, hidden_size 3584 over
#   num_attention_heads 28 = head dim 128.
# Per-card rule from vLLM ModelConfig.get_num_kv_heads: 1 under MLA (the latent is whole on
# every TP rank), else max(1, total_num_kv_heads // tensor_parallel_size).
DEEPSEEK_V3 = KvShape(61, 128, 128, "bf16", mla=True, kv_lora_rank=512, qk_rope_head_dim=64)
LLAMA_3_70B = KvShape(80, 8, 128, "bf16")
QWEN2_7B = KvShape(28, 4, 128, "bf16")


def test_deepseek_v3_at_tp8_holds_the_whole_latent_on_every_card():
    assert kv_bytes_per_token_per_card(DEEPSEEK_V3, 8) == 61 * 576 * 2 == 70_272
    # 100,000 tokens reserved: 7.03 GB on each of the 8 cards, not 0.88 GB (an even split).
    reservation = 100_000 * 70_272
    card = kv_reservation_per_card(reservation, DEEPSEEK_V3, 8)
    assert card.bytes == reservation
    assert card.how == "shape"


def test_llama_3_70b_at_tp8_keeps_one_kv_head_a_card():
    assert kv_bytes_per_token_per_card(LLAMA_3_70B, 1) == 327_680
    assert kv_bytes_per_token_per_card(LLAMA_3_70B, 8) == 2 * 80 * 1 * 128 * 2 == 40_960
    assert kv_reservation_per_card(8 * 327_680, LLAMA_3_70B, 8).bytes == 8 * 40_960


def test_llama_3_70b_at_tp16_replicates_its_8_heads_rather_than_halving_them():
    # 16 ranks, 8 KV heads: each head on two cards, so a card holds 1/8 of the KV, not 1/16.
    assert kv_bytes_per_token_per_card(LLAMA_3_70B, 16) == 40_960
    reservation = 160 * 1024**3
    assert kv_reservation_per_card(reservation, LLAMA_3_70B, 16).bytes == 20 * 1024**3


def test_qwen2_7b_per_card_at_tp1_2_and_8():
    assert kv_bytes_per_token_per_card(QWEN2_7B) == 2 * 28 * 4 * 128 * 2 == 57_344
    assert kv_bytes_per_token_per_card(QWEN2_7B, 2) == 28_672
    # TP=8 over 4 KV heads: one head a card, replicated twice.
    assert kv_bytes_per_token_per_card(QWEN2_7B, 8) == 14_336


def test_pipeline_stages_split_the_layers_and_the_fullest_stage_counts():
    # DeepSeek-V3's 61 layers over 2 stages: 31 and 30; the card of the 31 is the bound.
    assert kv_bytes_per_token_per_card(DEEPSEEK_V3, 8, 2) == 31 * 576 * 2
    assert kv_bytes_per_token_per_card(LLAMA_3_70B, 8, 2) == 2 * 40 * 1 * 128 * 2


def test_without_a_shape_the_reservation_is_split_evenly_and_says_so():
    card = kv_reservation_per_card(10 * 1024**3 + 1, None, 2)
    assert card.bytes == 5 * 1024**3 + 1
    assert card.how == "even_split"
    assert card.bytes_per_token is None


def test_parallelism_below_one_is_refused():
    with pytest.raises(ValueError, match="tensor_parallel"):
        kv_bytes_per_token_per_card(QWEN2_7B, 0)
