"""The PyTorch FlashAttention reference against SDPA, and the HBM-traffic arithmetic."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from itertools import pairwise

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right
from torch.utils.flop_counter import FlopCounterMode

from llmserve_ref.device import get_device
from llmserve_ref.kernels import flash_attention as flash_module
from llmserve_ref.kernels.flash_attention import (
    TOLERANCE,
    AttentionShape,
    attention_flops,
    causal_mask,
    expand_kv,
    flash_attention,
    merge_partials,
    naive_attention,
    naive_hbm_bytes,
    sdpa_attention,
    split_kv_attention,
    tiled_hbm_bytes,
)

DEVICE = get_device()

# (batch, q_heads, kv_heads, q_len, kv_len, head_dim, causal): length 1, ragged lengths,
# GQA ratios 1/4/8, chunked prefill (q_len < kv_len), head dims 32/64/128.
SHAPES = [
    (1, 1, 1, 1, 1, 32, True),
    (1, 2, 2, 1, 77, 64, True),
    (2, 4, 1, 37, 37, 64, True),
    (1, 8, 1, 50, 130, 32, True),
    (1, 4, 4, 100, 100, 128, False),
    (1, 8, 2, 64, 64, 128, True),
    (2, 4, 1, 70, 200, 32, False),
]
DTYPES = [torch.float32, torch.float16]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """torch's default dtype set to `dtype` inside the block, and put back after it."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def make_qkv(shape, dtype, seed=0):
    batch, q_heads, kv_heads, q_len, kv_len, head_dim, _ = shape
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, q_len, head_dim, generator=gen)
    k = torch.randn(batch, kv_heads, kv_len, head_dim, generator=gen)
    v = torch.randn(batch, kv_heads, kv_len, head_dim, generator=gen)
    return (t.to(DEVICE, dtype) for t in (q, k, v))


def assert_close(actual, expected, dtype):
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(actual.cpu().double(), expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("blocks", [(64, 64), (16, 32)], ids=["blocks64x64", "blocks16x32"])
def test_flash_reference_matches_sdpa(shape, dtype, blocks):
    q, k, v = make_qkv(shape, dtype)
    out, lse = flash_attention(q, k, v, causal=shape[-1], block_m=blocks[0], block_n=blocks[1])
    expected, expected_lse = sdpa_attention(q, k, v, causal=shape[-1])
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert_close(out, expected, dtype)
    assert_close(lse, expected_lse, torch.float32)


def test_an_explicit_scale_is_used_and_the_default_is_not_causal():
    """Two query heads per KV head (the smallest group) and a scale of 0.5, against SDPA
    and against the sum written out (the oracle itself must take the scale)."""
    q, k, v = make_qkv((1, 4, 2, 9, 20, 32, False), torch.float32, seed=3)
    qd, kd, vd = (t.cpu().double() for t in (q, k, v))
    kd, vd = kd.repeat_interleave(2, dim=1), vd.repeat_interleave(2, dim=1)
    for scale in (None, 0.5):
        scores = qd @ kd.transpose(-1, -2) * (scale or 32**-0.5)
        written_out = (scores.softmax(dim=-1) @ vd, scores.logsumexp(dim=-1))
        expected, expected_lse = sdpa_attention(q, k, v, scale=scale)
        assert_close(expected, written_out[0], torch.float32)
        assert_close(expected_lse, written_out[1], torch.float32)
        out, lse = naive_attention(q, k, v, scale=scale)
        assert_close(out, expected, torch.float32)
        assert_close(lse, expected_lse, torch.float32)
        out, lse = flash_attention(q, k, v, scale=scale, block_m=4, block_n=8)
        assert_close(out, expected, torch.float32)
        assert_close(lse, expected_lse, torch.float32)
        out, lse = split_kv_attention(q, k, v, num_splits=3, scale=scale)
        assert_close(out, expected, torch.float32)
        assert_close(lse, expected_lse, torch.float32)


def test_every_tensor_is_made_on_the_inputs_device_not_the_default_one():
    """Under a default device of `meta`, a tensor made without `device=` would land there."""
    q, k, v = make_qkv((1, 2, 2, 5, 7, 16, True), torch.float32, seed=1)
    expected = flash_attention(q, k, v, causal=True, block_m=2, block_n=3)
    with torch.device("meta"):
        out, lse = flash_attention(q, k, v, causal=True, block_m=2, block_n=3)
        naive, _ = naive_attention(q, k, v, causal=True)
        mask = causal_mask(5, 7, device=q.device)
    assert out.device == lse.device == naive.device == mask.device == q.device
    assert torch.equal(out, expected[0]) and torch.equal(lse, expected[1])
    assert torch.equal(mask, causal_mask(5, 7, device=q.device))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_the_output_and_lse_are_float32_buffers_whatever_the_default_dtype(dtype):
    """Under a float16 default dtype, a buffer made without `dtype=` would round the output
    and the LSE to float16's 11 bits; under float64, running statistics made without it
    would meet float32 tiles in a matmul and fail. Every buffer is float32 whatever the
    default."""
    q, k, v = make_qkv((1, 2, 2, 9, 20, 32, True), torch.float32, seed=5)
    expected, expected_lse = flash_attention(q, k, v, causal=True, block_m=4, block_n=8)
    with default_dtype(dtype):
        out, lse = flash_attention(q, k, v, causal=True, block_m=4, block_n=8)
    assert out.dtype == lse.dtype == torch.float32
    assert torch.equal(out, expected) and torch.equal(lse, expected_lse)


def test_kv_heads_are_copied_only_when_each_serves_several_query_heads():
    k = torch.arange(12.0).reshape(1, 2, 3, 2)
    assert expand_kv(k, 1) is k
    assert torch.equal(expand_kv(k, 2), k[:, [0, 0, 1, 1]])


def pairs_scored(q_len: int, kv_len: int, causal: bool, **blocks: int) -> int:
    """The (query, key) pairs `flash_attention` scores on one head, read off its FLOPs:
    Q Kᵀ and P V each cost 2 * head_dim per pair, whatever the tile shapes."""
    head_dim = 16
    q, k, v = make_qkv((1, 1, 1, q_len, kv_len, head_dim, causal), torch.float32)
    with FlopCounterMode(display=False) as counter:
        flash_attention(q, k, v, causal=causal, **blocks)
    flops = counter.get_total_flops()
    assert flops % (4 * head_dim) == 0
    return flops // (4 * head_dim)


def test_a_causal_query_tile_skips_the_key_tiles_past_its_last_row():
    """128 queries and keys in 32 x 32 tiles: query tile i scores key tiles 0 .. i, 10 tile
    products of the 16 that a non-causal call scores; each query row is in one tile only."""
    assert pairs_scored(128, 128, causal=True, block_m=32, block_n=32) == 10 * 32 * 32
    assert pairs_scored(128, 128, causal=False, block_m=32, block_n=32) == 16 * 32 * 32
    # A chunk of 32 queries after 96 cached keys: one query tile, all four key tiles.
    assert pairs_scored(32, 128, causal=True, block_m=32, block_n=32) == 4 * 32 * 32


def test_the_default_tiles_are_64_queries_by_64_keys():
    """Causal 128 x 128 in 64 x 64 tiles scores 3 tile products of the 4; a tile one row or
    one key longer would score another number of pairs."""
    assert pairs_scored(128, 128, causal=True) == 3 * 64 * 64


def test_naive_returns_the_inputs_dtype():
    q, k, v = make_qkv((1, 2, 2, 3, 3, 16, True), torch.float16)
    assert naive_attention(q, k, v, causal=True)[0].dtype == torch.float16


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_naive_matches_sdpa(shape):
    q, k, v = make_qkv(shape, torch.float32, seed=1)
    out, lse = naive_attention(q, k, v, causal=shape[-1])
    expected, expected_lse = sdpa_attention(q, k, v, causal=shape[-1])
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


def test_causal_mask_is_pytorch_lower_right():
    """Our convention is PyTorch's `causal_lower_right`, not `is_causal=True` (top-left)."""
    shape = (1, 2, 2, 5, 12, 32, True)
    q, k, v = (t.cpu() for t in make_qkv(shape, torch.float32, seed=2))
    lower_right = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(5, 12)
    )
    top_left = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    ours, _ = naive_attention(q, k, v, causal=True)
    torch.testing.assert_close(ours, lower_right)
    assert not torch.allclose(ours, top_left, atol=1e-3)
    assert causal_mask(5, 12).sum().item() == sum(12 - 5 + i + 1 for i in range(5))


def test_square_causal_agrees_with_is_causal():
    shape = (1, 2, 2, 9, 9, 32, True)
    q, k, v = (t.cpu() for t in make_qkv(shape, torch.float32, seed=3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, block_m=4)[0], expected)


@pytest.mark.parametrize("kv_len", [1, 63, 300])
@pytest.mark.parametrize("num_splits", [1, 3, 8])
def test_split_kv_reference_matches_sdpa(kv_len, num_splits):
    q, k, v = make_qkv((2, 8, 2, 1, kv_len, 64, False), torch.float32, seed=kv_len)
    out, lse = split_kv_attention(q, k, v, num_splits)
    expected, expected_lse = sdpa_attention(q, k, v)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


def test_split_kv_cuts_the_keys_into_num_splits_near_equal_parts(monkeypatch):
    """10 keys in 3 parts are cut at round(10/3) and round(20/3); 2 keys in 3 parts make
    two parts of one key, the empty one is skipped."""
    lengths = []

    def spy(q, k, v, **kwargs):
        lengths.append(k.shape[-2])
        return flash_attention(q, k, v, **kwargs)

    monkeypatch.setattr(flash_module, "flash_attention", spy)
    for kv_len, expected in ((10, [3, 4, 3]), (2, [1, 1])):
        lengths.clear()
        q, k, v = make_qkv((1, 2, 2, 1, kv_len, 16, False), torch.float32, seed=kv_len)
        out, lse = split_kv_attention(q, k, v, num_splits=3)
        assert lengths == expected
        expected_out, expected_lse = sdpa_attention(q, k, v)
        assert_close(out, expected_out, torch.float32)
        assert_close(lse, expected_lse, torch.float32)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(cuts=st.lists(st.integers(1, 39), max_size=5, unique=True))
def test_merge_of_any_partition_is_exact(cuts):
    """However the keys are cut into parts, merging by LSE gives attention over all of them."""
    q, k, v = (t.cpu() for t in make_qkv((1, 2, 2, 3, 40, 32, False), torch.float32, seed=4))
    bounds = [0, *sorted(cuts), 40]
    parts = [naive_attention(q, k[..., a:b, :], v[..., a:b, :]) for a, b in pairwise(bounds)]
    out, lse = merge_partials([o for o, _ in parts], [s for _, s in parts])
    expected, expected_lse = sdpa_attention(q, k, v)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


def test_merge_returns_the_parts_dtype():
    q, k, v = make_qkv((1, 2, 2, 3, 8, 16, False), torch.float16, seed=2)
    parts = [flash_attention(q, k[..., a:b, :], v[..., a:b, :]) for a, b in ((0, 3), (3, 8))]
    out, _ = merge_partials([o for o, _ in parts], [s for _, s in parts])
    assert out.dtype == torch.float16
    assert_close(out, sdpa_attention(q, k, v)[0], torch.float16)


def test_each_query_row_keeps_its_own_running_max():
    """Rows whose scores lie far apart: a max shared across rows would underflow the
    smaller rows' exponentials to zero, and their outputs to NaN."""
    q, k, v = make_qkv((1, 1, 1, 2, 8, 16, False), torch.float32, seed=7)
    q = q * torch.tensor([1.0, 200.0], device=q.device)[:, None]  # row 1's scores ~200x row 0's
    expected, expected_lse = sdpa_attention(q, k, v)
    out, lse = flash_attention(q, k, v)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


@pytest.mark.parametrize(
    ("q_shape", "kv_shape", "causal", "message"),
    [
        ((1, 2, 4, 16), (1, 4, 4, 16), False, "2 query heads is not a multiple of 4 KV heads"),
        ((1, 2, 5, 16), (1, 1, 4, 16), True, "pass at least as many keys as queries"),
        ((1, 2, 4, 16), (1, 1, 4, 32), False, "must agree on batch"),
        ((2, 4, 16), (1, 1, 4, 16), False, "must be 4-D"),
        ((1, 2, 0, 16), (1, 1, 4, 16), False, "empty sequence"),
    ],
)
@pytest.mark.parametrize("attention", [flash_attention, naive_attention, sdpa_attention])
def test_bad_arguments_say_what_to_do(q_shape, kv_shape, causal, message, attention):
    q, kv = torch.zeros(q_shape), torch.zeros(kv_shape)
    with pytest.raises(ValueError, match=message):
        attention(q, kv, kv, causal=causal)


def test_naive_bytes_count_four_passes_over_the_scores():
    shape = AttentionShape(
        batch=1, q_heads=1, kv_heads=1, q_len=4, kv_len=4, head_dim=2, dtype_bytes=2, causal=False
    )
    # Q, K, V read and O written: 4 * 4 * 2 elements; S written, read, P written, read: 4 * 16.
    assert naive_hbm_bytes(shape) == (4 * 4 * 2 + 4 * 16) * 2
    causal = AttentionShape(**{**shape.__dict__, "causal": True})
    assert naive_hbm_bytes(causal) == naive_hbm_bytes(shape)  # masked after QKᵀ


def test_tiled_bytes():
    shape = AttentionShape(
        batch=2, q_heads=8, kv_heads=2, q_len=1024, kv_len=1024, head_dim=64, causal=False
    )
    once = 4 * 1024 * 64 * 2 + 4 * 1024  # Q, K, V, O once, LSE in float32
    assert tiled_hbm_bytes(shape, block_m=1024) == once * 16
    # Eight query tiles of 128 each read all of K and V.
    assert tiled_hbm_bytes(shape, block_m=128) == (once + 7 * 2 * 1024 * 64 * 2) * 16
    causal = AttentionShape(**{**shape.__dict__, "causal": True})
    # Causal tile i reads (i + 1) * 128 keys: 36 tiles' worth instead of 64.
    kv_rows = sum((i + 1) * 128 for i in range(8))
    assert (
        tiled_hbm_bytes(causal, block_m=128) == ((2 * 1024 + 2 * kv_rows) * 64 * 2 + 4 * 1024) * 16
    )
    assert tiled_hbm_bytes(causal) < tiled_hbm_bytes(shape) < naive_hbm_bytes(shape)
    # The default tile is 128 queries: 129 of them take two tiles, two passes over K and V.
    odd = AttentionShape(batch=1, q_heads=1, kv_heads=1, q_len=129, kv_len=129, head_dim=64)
    assert tiled_hbm_bytes(odd) == tiled_hbm_bytes(odd, block_m=128)
    assert tiled_hbm_bytes(odd) > tiled_hbm_bytes(odd, block_m=129)


def test_flops_count_visible_pairs():
    square = AttentionShape(1, 1, 1, 100, 100, 64, causal=True)
    assert attention_flops(square) == 4 * (100 * 101 // 2) * 64
    chunk = AttentionShape(1, 1, 1, 10, 100, 64, causal=True)  # rows see 91 ... 100 keys
    assert attention_flops(chunk) == 4 * sum(range(91, 101)) * 64
    full = AttentionShape(2, 4, 1, 10, 100, 64, causal=False)
    assert attention_flops(full) == 4 * 10 * 100 * 64 * 8
