"""Step-time predictions against FLOP and byte counts worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import CatalogModel, model
from llmserve_ref.planning.roofline import (
    ROOFLINE,
    VLLM_H100,
    Efficiency,
    Roof,
    StepCost,
    datasheet_roof,
    linear_parameters,
    prefill_attention_pairs,
)

LLAMA = model("Llama-3.1-8B")
EMBEDDING = 128256 * 4096
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, layers, KV heads, head_dim, bf16 bytes
PER_PAIR = 4 * 32 * 32 * 128  # q.k and p.v, multiply-add each, per layer and query head


def test_linear_parameters_drop_only_an_untied_embedding():
    assert linear_parameters(LLAMA) == 8_030_261_248 - EMBEDDING
    tied = CatalogModel("tied", "x", 1000, {**LLAMA.config_json, "tie_word_embeddings": True})
    assert linear_parameters(tied) == 1000
    with pytest.raises(ValueError, match="mixture of experts"):
        linear_parameters(model("DeepSeek-V3"))


def test_decode_intensity_by_hand():
    cost = StepCost(LLAMA, gpu("H100-SXM"))
    n = 8_030_261_248 - EMBEDDING
    for batch, context in [(1, 0), (1, 1000), (16, 4096), (256, 8000)]:
        flops = 2 * n * batch + PER_PAIR * batch * (context + 1)
        moved = 2 * n + KV_PER_TOKEN * batch * (context + 1)
        assert cost.arithmetic_intensity(batch, batch * context) == pytest.approx(flops / moved)
        expected = max(flops / 989.5e12, moved / 3.35e12)
        assert cost.decode_step_time(batch, context) == pytest.approx(expected)
    # batch 1, no context: 2 FLOPs per weight over 2 bytes per weight
    assert cost.arithmetic_intensity(1, 0) == pytest.approx(1.0, rel=1e-3)


def test_prefill_pairs_and_compute_bound():
    assert prefill_attention_pairs(3) == 1 + 2 + 3
    assert prefill_attention_pairs(3, cached=5) == 6 + 7 + 8
    cost = StepCost(LLAMA, gpu("H100-SXM"))
    pairs = prefill_attention_pairs(4096)
    t = cost.step_time(4096, 0, pairs)
    flops = 2 * (8_030_261_248 - EMBEDDING) * 4096 + PER_PAIR * pairs
    assert t == pytest.approx(flops / 989.5e12)  # compute-bound: the FLOPs decide
    assert cost.arithmetic_intensity(4096, 0, pairs) > gpu("H100-SXM").ridge_point()


def test_memory_bound_decode_is_flat_then_linear():
    cost = StepCost(LLAMA, gpu("H100-SXM"))
    t1, t8 = cost.decode_step_time(1, 100), cost.decode_step_time(8, 100)
    assert t8 < 1.1 * t1  # eight times the tokens for under 10% more time
    big = cost.decode_step_time(4096, 100)
    assert cost.decode_step_time(8192, 100) == pytest.approx(2 * big, rel=0.05)


def test_precision_changes_bytes_and_peak():
    bf16 = StepCost(LLAMA, gpu("H100-SXM"))
    fp8 = StepCost(LLAMA, gpu("H100-SXM"), weight_dtype="fp8", kv_dtype="fp8")
    int4 = StepCost(LLAMA, gpu("H100-SXM"), weight_dtype="int4")
    assert fp8.weight_bytes * 2 == bf16.weight_bytes == int4.weight_bytes * 4
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.roof.peak_flops == 2 * bf16.roof.peak_flops  # fp8 matmuls on Hopper
    assert int4.roof.peak_flops == bf16.roof.peak_flops  # weight-only: bf16 matmuls
    a100 = StepCost(LLAMA, gpu("A100-SXM-80GB"), weight_dtype="fp8")
    assert a100.roof.peak_flops == 312e12  # no fp8 units: weight-only fp8
    assert fp8.decode_step_time(1, 0) == pytest.approx(bf16.decode_step_time(1, 0) / 2, rel=1e-3)


def test_efficiency_scales_each_ceiling():
    ideal = StepCost(LLAMA, gpu("H100-SXM"))
    assert ideal.efficiency == ROOFLINE == Efficiency(1.0, 1.0)  # the default is the datasheet
    slow = StepCost(LLAMA, gpu("H100-SXM"), efficiency=Efficiency(mfu=0.5, mbu=0.8))
    assert slow.decode_step_time(1, 0) == pytest.approx(ideal.decode_step_time(1, 0) / 0.8)
    pairs = prefill_attention_pairs(4096)
    assert slow.step_time(4096, 0, pairs) == pytest.approx(ideal.step_time(4096, 0, pairs) / 0.5)
    assert slow.compute_time(4096, pairs) == pytest.approx(ideal.compute_time(4096, pairs) / 0.5)
    assert slow.memory_time(1, 1000) == pytest.approx(ideal.memory_time(1, 1000) / 0.8)
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match="mfu is a fraction"):
            Efficiency(mfu=bad)
    assert 0 < VLLM_H100.mfu < 1 and 0 < VLLM_H100.mbu < 1


def test_step_time_is_the_larger_of_compute_and_memory():
    cost = StepCost(LLAMA, gpu("H100-SXM"), efficiency=VLLM_H100)
    for tokens, kv, pairs in [(1, 1000, 1001), (2048, 0, prefill_attention_pairs(2048))]:
        expected = max(cost.compute_time(tokens, pairs), cost.memory_time(tokens, kv))
        assert cost.step_time(tokens, kv, pairs) == pytest.approx(expected)


def test_vectorized_equals_scalar():
    cost = StepCost(LLAMA, gpu("H200-SXM"))
    tokens = np.array([1, 7, 64, 512, 2048])
    kv = np.array([0, 7000, 64 * 3000, 100, 0])
    many = cost.step_time(tokens, kv)
    assert many.shape == (5,)
    for t, k, m in zip(tokens.tolist(), kv.tolist(), many.tolist(), strict=True):
        assert cost.step_time(t, k) == pytest.approx(m)
        assert isinstance(cost.step_time(t, k), float)


def test_roof_of_a_measured_machine():
    roof = Roof("cpu", peak_flops=100e9, memory_bandwidth=20e9)
    assert roof.ridge_point == 5
    assert roof.attainable_flops(1) == 20e9 and roof.attainable_flops(50) == 100e9
    tiny = CatalogModel("tiny", "x", 1_000_000, {**LLAMA.config_json, "tie_word_embeddings": True})
    cost = StepCost(tiny, roof, weight_dtype="fp32", kv_dtype="fp32")
    assert cost.weight_bytes == 4_000_000
    assert datasheet_roof(gpu("L4")).ridge_point == pytest.approx(121e12 / 300e9)
