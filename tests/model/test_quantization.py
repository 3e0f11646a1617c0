"""Quantization round trips, error bounds, packing, fp8 clamp ranges and the quantized cache."""

from __future__ import annotations

import pytest
import torch

from llmserve_ref.model.kv_cache import KVCache
from llmserve_ref.model.quantization import (
    QuantizedKVCache,
    QuantizedLinear,
    dequantize_fp8,
    dequantize_int4,
    dequantize_int8,
    model_bytes,
    quantize_fp8,
    quantize_int4,
    quantize_int8,
    quantize_kv_int8,
    quantize_linears,
    unpack_int4,
)


@pytest.fixture
def w():
    return torch.randn(48, 256, generator=torch.Generator().manual_seed(0)) * 0.02


def test_int8_error_is_at_most_half_a_step_per_row(w):
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and q.abs().max() == 127  # each row's extreme maps to ±127
    err = (dequantize_int8(q, scale) - w).abs()
    assert torch.all(err <= scale[:, None] / 2 + 1e-9)
    assert torch.equal(quantize_int8(dequantize_int8(q, scale))[0], q)  # a fixed point


@pytest.mark.parametrize("group_size", [16, 32, 128])
def test_int4_error_is_at_most_half_a_step_per_group(w, group_size):
    packed, scales = quantize_int4(w, group_size)
    assert packed.shape == (48, 128) and scales.shape == (48, 256 // group_size)
    err = (dequantize_int4(packed, scales) - w).abs().reshape(48, -1, group_size)
    assert torch.all(err <= scales[..., None] / 2 + 1e-9)


def test_smaller_groups_are_more_accurate(w):
    w = w.clone()
    w[:, 7] = 1.0  # an outlier column, as LLM activations and weights have
    errors = [(dequantize_int4(*quantize_int4(w, g)) - w).pow(2).mean() for g in (16, 64, 256)]
    assert errors[0] < errors[1] < errors[2]


def test_int4_packing_by_hand():
    values = torch.tensor([[-8, 7, -1, 0, 3, -3]], dtype=torch.int8)
    # low nibble first: (-8, 7) -> 0x8 | 0x7 << 4 = 0x78; (-1, 0) -> 0x0F; (3, -3) -> 0xD3
    packed, scales = quantize_int4(values.float(), group_size=6)
    assert scales.item() == pytest.approx(8 / 7)  # amax 8 over 7
    assert torch.equal(unpack_int4(torch.tensor([[0x78, 0x0F, 0xD3]], dtype=torch.uint8)), values)
    rounded = torch.round(values / (8 / 7)).clamp(-8, 7).to(torch.int8)
    assert torch.equal(unpack_int4(packed), rounded)


def test_int4_refuses_groups_that_do_not_divide(w):
    with pytest.raises(ValueError, match="must be even and divide the 256 input features"):
        quantize_int4(w, group_size=24)


@pytest.mark.parametrize(("fmt", "fmax"), [("e4m3fn", 448.0), ("e4m3fnuz", 240.0)])
def test_fp8_clamps_to_each_formats_maximum(fmt, fmax):
    x = torch.tensor([1e4, -1e4, 1.0, 0.0])
    q, _ = quantize_fp8(x, fmt, scale=torch.tensor(1.0))
    assert q.float().tolist() == [fmax, -fmax, 1.0, 0.0]
    if fmt == "e4m3fnuz":  # a plain cast past 240 gives NaN (e4m3fn's saturates in torch 2.13)
        assert torch.isnan(x[:1].to(q.dtype).float()).item()
    q, scale = quantize_fp8(x, fmt)  # with its own scale: amax lands on the maximum
    assert q.float().abs().max().item() == fmax
    assert dequantize_fp8(q, scale)[0].item() == pytest.approx(1e4)


def test_fp8_relative_error_is_bounded():
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(1))
    for fmt in ("e4m3fn", "e4m3fnuz"):
        q, scale = quantize_fp8(x, fmt)
        y = dequantize_fp8(q, scale)
        big = x.abs() > 0.1
        assert ((y - x).abs()[big] / x.abs()[big]).max() <= 2**-4 + 1e-6  # 3 mantissa bits


def test_kv_int8_scale_per_token_and_head():
    x = torch.randn(2, 4, 5, 32)
    q, scale = quantize_kv_int8(x)
    assert scale.shape == (2, 4, 5, 1)
    assert torch.all((q.float() * scale - x).abs() <= scale / 2 + 1e-7)


@pytest.mark.parametrize(
    ("bits", "fused", "atol"), [(8, False, 0.02), (8, True, 0.02), (4, False, 0.2)]
)
def test_quantized_linear_is_close_to_the_float_layer(bits, fused, atol):
    torch.manual_seed(0)
    linear = torch.nn.Linear(256, 64, bias=False)
    x = torch.randn(3, 5, 256)
    layer = QuantizedLinear(linear, bits, group_size=32, fused=fused)
    assert layer(x).shape == (3, 5, 64)
    assert torch.allclose(layer(x), linear(x), atol=atol)
    assert torch.allclose(layer(x), x @ layer.dequantized_weight().T, atol=1e-4)


def test_quantize_linears_keeps_the_head_and_saves_memory(tiny_llama):
    model = tiny_llama()
    before = model_bytes(model)
    quantize_linears(model, 8)
    names = [n for n, m in model.named_modules() if isinstance(m, QuantizedLinear)]
    assert len(names) == 2 * 7 and "lm_head" not in names
    assert isinstance(model.lm_head, torch.nn.Linear)
    linear_params = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128)  # q o, k v, gate up down
    rows = 2 * (2 * 64 + 2 * 32 + 2 * 128 + 64)  # one fp32 scale per output row
    assert before - model_bytes(model) == linear_params * 3 - rows * 4


@pytest.mark.parametrize("fmt", ["int8", "e4m3fn", "e4m3fnuz"])
def test_quantized_cache_matches_the_float_cache(fmt, tiny_llama):
    model = tiny_llama()
    ids = torch.randint(64, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(ids, model.make_cache(2, 16))
        cache = QuantizedKVCache(model.make_cache(2, 16), fmt)
        got = model(ids[:, :8], cache)  # prefill, then decode one token at a time
        steps = [model(ids[:, i : i + 1], cache) for i in range(8, 12)]
    assert cache.length == 12
    full = torch.cat([got, *steps], dim=1)
    assert torch.allclose(full, expected, atol=0.05)
    float_cache = KVCache(2, 2, 2, 16, 16)
    assert cache.nbytes < float_cache.nbytes / 3


def test_quantized_cache_overflow_and_bad_format(tiny_llama):
    model = tiny_llama()
    cache = QuantizedKVCache(model.make_cache(1, 4), "int8")
    with pytest.raises(ValueError, match="overflow"):
        model(torch.zeros(1, 5, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="kv_format is 'int8' or one of e4m3fn, e4m3fnuz"):
        QuantizedKVCache(model.make_cache(1, 4), "int4")
