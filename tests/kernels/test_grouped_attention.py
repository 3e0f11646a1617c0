"""`grouped_attention` against SDPA, and the head grouping it promises.

Two outside oracles: `torch.nn.functional.scaled_dot_product_attention` run on K and V
copied once per query head (the textbook formulation the module avoids), and SDPA's own
``enable_gqa``, both with the mask spelled out from absolute positions. The grouping
convention (query heads ``g * group .. (g + 1) * group - 1`` share K/V head ``g``, as
``repeat_interleave`` and Hugging Face's ``repeat_kv`` have it) is checked on values that
name their head, without SDPA.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llmserve_ref.device import get_device
from llmserve_ref.kernels.grouped_attention import grouped_attention

DEVICE = get_device()
ATOL = 1e-5  # fp32


def reference_attention(q, k, v, start):
    """The textbook formulation: copy each K/V head for its group, then SDPA with a mask."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    T, S = q.shape[2], k.shape[2]
    mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=start)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
@pytest.mark.parametrize(("T", "S"), [(6, 6), (1, 9), (3, 10)])
def test_grouped_attention_matches_repeated_kv_sdpa(num_kv_heads, T, S):
    g = torch.Generator().manual_seed(num_kv_heads)
    q = torch.randn(2, 8, T, 16, generator=g).to(DEVICE)
    k = torch.randn(2, num_kv_heads, S, 16, generator=g).to(DEVICE)
    v = torch.randn(2, num_kv_heads, S, 16, generator=g).to(DEVICE)
    positions = torch.arange(S - T, S, device=DEVICE)  # the last T of S positions
    torch.testing.assert_close(
        grouped_attention(q, k, v, positions),
        reference_attention(q, k, v, start=S - T),
        atol=ATOL,
        rtol=1e-5,
    )


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    batch=st.integers(1, 2),
    kv_heads=st.sampled_from([1, 2, 3]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([1, 8, 24]),
    lengths=st.integers(1, 12).flatmap(lambda S: st.tuples(st.integers(1, S), st.just(S))),
    seed=st.integers(0, 2**16),
)
def test_any_shape_matches_sdpa_with_enable_gqa(batch, kv_heads, group, head_dim, lengths, seed):
    """In float64, against SDPA's own grouped-query path: odd head counts, head_dim 1."""
    T, S = lengths
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, kv_heads * group, T, head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, S, head_dim, generator=g, dtype=torch.float64)
    v = torch.randn(batch, kv_heads, S, head_dim, generator=g, dtype=torch.float64)
    positions = torch.arange(S - T, S)
    mask = torch.arange(S) <= positions[:, None]  # [T, S]: query at p sees keys 0..p
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(grouped_attention(q, k, v, positions), expected)


def test_positions_are_absolute_not_the_last_t_of_the_keys():
    """Queries at positions 2, 3, 4 over 8 stored keys see keys 0..p only, not all of the
    first S - T + t: the mask comes from `positions`, whatever S is."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 3, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 8, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 8, 8, generator=g, dtype=torch.float64)
    positions = torch.tensor([2, 3, 4])
    out = grouped_attention(q, k, v, positions)
    for t, p in enumerate(positions.tolist()):  # only keys 0..p exist for this query
        alone = grouped_attention(q[:, :, t : t + 1], k[:, :, : p + 1], v[:, :, : p + 1],
                                  torch.tensor([p]))  # fmt: skip
        torch.testing.assert_close(out[:, :, t : t + 1], alone)
    # Changing a key no query may see changes nothing.
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 5:], v2[:, :, 5:] = 1e3, -1e3
    torch.testing.assert_close(grouped_attention(q, k2, v2, positions), out)


def test_consecutive_query_heads_share_a_kv_head():
    """Values that name their K/V head: query head h reads K/V head h // group."""
    heads, kv_heads, S, d = 6, 3, 5, 4
    group = heads // kv_heads
    q = torch.randn(1, heads, 2, d, generator=torch.Generator().manual_seed(0))
    k = torch.zeros(1, kv_heads, S, d)
    v = torch.arange(kv_heads, dtype=torch.float32).view(1, kv_heads, 1, 1).expand(1, -1, S, d)
    out = grouped_attention(q, k, v, torch.tensor([3, 4]))
    expected = torch.tensor([h // group for h in range(heads)], dtype=torch.float32)
    torch.testing.assert_close(out[0, :, :, 0], expected[:, None].expand(heads, 2))


def test_uniform_scores_average_the_visible_values():
    """All scores equal: the output at position p is the mean of values 0..p."""
    q, k = torch.ones(1, 2, 4, 8), torch.ones(1, 1, 4, 8)
    v = torch.arange(4.0).view(1, 1, 4, 1).expand(1, 1, 4, 8)
    out = grouped_attention(q, k, v, torch.arange(4))
    torch.testing.assert_close(out[0, 0, :, 0], torch.tensor([0.0, 0.5, 1.0, 1.5]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_keeps_its_dtype_and_stays_close(dtype):
    """The softmax runs in float32 and the result comes back in the input's dtype."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, h, n, 16, generator=g) for h, n in ((4, 3), (2, 7), (2, 7)))
    positions = torch.arange(4, 7)
    out = grouped_attention(q.to(dtype), k.to(dtype), v.to(dtype), positions)
    assert out.dtype == dtype and out.shape == q.shape
    tolerance = {torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(
        out.float(), reference_attention(q, k, v, start=4), atol=tolerance, rtol=tolerance
    )


class NewTensors(TorchDispatchMode):
    """Records every tensor an operator returns while the mode is on."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[tuple[str, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.outputs.append((str(func), t))
        return out


def copies(attention, q, k, v, positions) -> list[str]:
    """The operators that returned a tensor as large as K in fresh memory (not a view of
    K's or V's storage) while `attention` ran."""
    stored = {k.untyped_storage().data_ptr(), v.untyped_storage().data_ptr()}
    with NewTensors() as mode:
        attention(q, k, v, positions)
    return [
        name
        for name, t in mode.outputs
        if t.numel() >= k.numel() and t.untyped_storage().data_ptr() not in stored
    ]


def test_no_copy_of_k_or_v_is_made():
    """One query per head (T = 1) and head_dim 16, so every tensor the call makes is
    smaller than K unless it copies K or V: none does."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 8, 1, 16, generator=g)
    k = torch.randn(1, 2, 32, 16, generator=g)
    v = torch.randn(1, 2, 32, 16, generator=g).flip(2)  # a view with negative strides
    positions = torch.tensor([31])
    assert copies(grouped_attention, q, k, v, positions) == []
    # The check sees a copy where there is one: the textbook formulation repeats K and V.
    made = copies(lambda *qkvp: reference_attention(*qkvp[:3], start=31), q, k, v, positions)
    assert len(made) >= 2, made  # K and V, each repeated per query head
