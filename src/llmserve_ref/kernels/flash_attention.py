"""FlashAttention's forward pass in plain PyTorch, written to be read top to bottom.

Standard attention computes the whole score matrix `S = Q Kᵀ`, one row per query
and one column per key, writes it to memory, reads it back for the softmax, writes
the probabilities, and reads them again to multiply by `V`. FlashAttention computes
the same output one tile of queries at a time, streaming tiles of keys and values
past it, and never stores `S`: an *online softmax* keeps, for every query row, the
largest score seen so far (`m`), the sum of exponentials so far (`l`) and an
unnormalized output (`acc`), and rescales them whenever a new tile raises the max.

Shapes follow `torch.nn.functional.scaled_dot_product_attention`: `q` is
`(batch, q_heads, q_len, head_dim)`, `k` and `v` are `(batch, kv_heads, kv_len,
head_dim)`. With grouped-query attention (GQA) `kv_heads` divides `q_heads` and
query head `h` reads KV head `h // (q_heads // kv_heads)`.

Causal convention: **bottom-right aligned**. The `q_len` queries are the *last*
`q_len` positions of the `kv_len`-long sequence, so query row `i` sits at absolute
position `kv_len - q_len + i` and may attend to keys `0 .. kv_len - q_len + i`.
That is what chunked prefill against a KV cache needs, and it is flash-attn's
convention (since 2.1) and PyTorch's `torch.nn.attention.bias.causal_lower_right`.
It is *not* what `scaled_dot_product_attention(..., is_causal=True)` does when
`q_len < kv_len`: that mask is top-left aligned. With `q_len == kv_len` the two agree.

>>> causal_mask(2, 4).int()
tensor([[1, 1, 1, 0],
        [1, 1, 1, 1]], dtype=torch.int32)

Every function returns the output and the log-sum-exp (LSE) of each query row's
scaled scores, `log Σ_j exp(s_j)`, in float32 and natural log: the LSE is what lets
two partial results over different keys be merged exactly (`merge_partials`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

import torch
from torch import Tensor


def causal_mask(q_len: int, kv_len: int, device: torch.device | str | None = None) -> Tensor:
    """`(q_len, kv_len)` booleans, True where a query may attend to a key (bottom-right)."""
    rows = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)
    cols = torch.arange(kv_len, device=device)[None, :]
    return cols <= rows


def check_attention_args(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> int:
    """Check the shapes of an attention call and return the GQA group size.

    >>> q, kv = torch.zeros(1, 8, 3, 16), torch.zeros(1, 2, 5, 16)
    >>> check_attention_args(q, kv, kv, causal=True)
    4
    >>> check_attention_args(kv, q, q, causal=False)
    Traceback (most recent call last):
    ...
    ValueError: 2 query heads is not a multiple of 8 KV heads; ...
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D (batch, heads, seq_len, head_dim); got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    (batch, q_heads, q_len, head_dim), (kv_batch, kv_heads, kv_len, kv_dim) = q.shape, k.shape
    if batch != kv_batch or head_dim != kv_dim:
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree on batch "
            "(dim 0) and head_dim (dim 3)"
        )
    if q_heads % kv_heads:
        raise ValueError(
            f"{q_heads} query heads is not a multiple of {kv_heads} KV heads; "
            "with GQA every KV head serves the same number of query heads"
        )
    if q_len == 0 or kv_len == 0:
        raise ValueError(
            f"empty sequence: q_len={q_len}, kv_len={kv_len}; pass at least one query and one key"
        )
    if causal and q_len > kv_len:
        raise ValueError(
            f"causal attention with q_len={q_len} > kv_len={kv_len}: the queries "
            "are the last q_len positions of the keys, so pass at least as many "
            "keys as queries (append the new tokens' keys to the cache first)"
        )
    return q_heads // kv_heads


def expand_kv(x: Tensor, group: int) -> Tensor:
    """Repeat each KV head `group` times, so KV head `g` serves query heads `g*group ...`."""
    return x.repeat_interleave(group, dim=1) if group > 1 else x


# --8<-- [start:tolerance]
# Tests and the page check every implementation against `sdpa_attention` within these
# (atol, rtol), by input dtype. float32 only reorders sums; float16 and bfloat16 kernels
# round the probabilities P to 11 and 8 significant bits before P @ V, and their outputs too.
# The LSE is float32 whatever the inputs (scores accumulate in float32): check it with float32's.
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (3e-3, 3e-3),
    torch.bfloat16: (2e-2, 2e-2),
}
# --8<-- [end:tolerance]


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """The oracle: PyTorch's `scaled_dot_product_attention` in float64 on the CPU, and the LSE.

    The causal mask is passed explicitly (bottom-right, see the module docstring), since
    `is_causal=True` aligns it top-left. The LSE is `torch.logsumexp` of the scaled scores.
    """
    group = check_attention_args(q, k, v, causal)
    q, k, v = (t.cpu().double() for t in (q, k, v))
    mask = causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=group > 1
    )
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ expand_kv(k, group).transpose(-1, -2) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return out, torch.logsumexp(scores, dim=-1)


# --8<-- [start:naive]
def naive_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Standard attention: materialize the (q_len, kv_len) scores, softmax, multiply by V."""
    group = check_attention_args(q, k, v, causal)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = expand_kv(k, group).float(), expand_kv(v, group).float()
    scores = q.float() @ k.transpose(-1, -2) * scale  # the whole N x N matrix, in memory
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.softmax(scores, dim=-1)  # read it back, write it again
    return (probs @ v).to(q.dtype), lse  # and read it a third time


# --8<-- [end:naive]


# --8<-- [start:flash]
def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
) -> tuple[Tensor, Tensor]:
    """FlashAttention's forward pass: tiles of queries against a stream of key/value tiles."""
    group = check_attention_args(q, k, v, causal)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    k, v = expand_kv(k, group), expand_kv(v, group)
    # equivalent mutants: q and k are checked 4-D: shape[2] is shape[-2]
    q_len, kv_len = q.shape[-2], k.shape[-2]  # pragma: no mutate
    offset = kv_len - q_len  # query row i sits at absolute position offset + i
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)

    for m0 in range(0, q_len, block_m):  # one query tile: on a GPU, one program
        q_tile = q[..., m0 : m0 + block_m, :].float() * scale
        rows = torch.arange(m0, m0 + q_tile.shape[-2], device=q.device) + offset
        m_i = q_tile.new_full(q_tile.shape[:-1], -math.inf)  # running max
        l_i = q_tile.new_zeros(q_tile.shape[:-1])  # running sum of exp(s - m_i)
        acc = torch.zeros_like(q_tile)  # running sum of exp(s - m_i) @ V

        # A causal tile needs no keys past its last row's position: skip those tiles.
        kv_end = min(kv_len, int(rows[-1]) + 1) if causal else kv_len
        for n0 in range(0, kv_end, block_n):
            k_tile = k[..., n0 : n0 + block_n, :].float()
            v_tile = v[..., n0 : n0 + block_n, :].float()
            s = q_tile @ k_tile.transpose(-1, -2)  # (block_m, block_n) scores, never stored
            if causal:
                cols = torch.arange(n0, n0 + k_tile.shape[-2], device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)

            m_new = torch.maximum(m_i, s.amax(dim=-1))  # the max may have grown...
            alpha = torch.exp(m_i - m_new)  # ...so shrink what was summed against the old one
            p = torch.exp(s - m_new[..., None])
            l_i = alpha * l_i + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v_tile
            m_i = m_new

        out[..., m0 : m0 + block_m, :] = acc / l_i[..., None]  # normalize once, at the end
        lse[..., m0 : m0 + block_m] = m_i + torch.log(l_i)
    return out.to(q.dtype), lse


# --8<-- [end:flash]


# --8<-- [start:merge]
def merge_partials(outs: list[Tensor], lses: list[Tensor]) -> tuple[Tensor, Tensor]:
    """Merge attention results over disjoint sets of keys into the result over all of them.

    Each part `i` is a softmax-weighted average `o_i` over its keys with log-normalizer
    `lse_i`; over all keys the weights are `exp(lse_i - lse)`, `lse = log Σ_i exp(lse_i)`.
    """
    lse_all = torch.stack(lses)  # (parts, ...)
    lse = torch.logsumexp(lse_all, dim=0)
    weights = torch.exp(lse_all - lse)[..., None]  # each part's share of the total mass
    out = (weights * torch.stack([o.float() for o in outs])).sum(dim=0)
    return out.to(outs[0].dtype), lse


def split_kv_attention(
    q: Tensor, k: Tensor, v: Tensor, num_splits: int, scale: float | None = None
) -> tuple[Tensor, Tensor]:
    """Flash-decoding: split the keys into `num_splits` parts, attend to each, merge.

    On a GPU the parts run in parallel, which is what keeps the chip busy when there is
    one query per sequence. Non-causal: every new query sees the whole cache.
    """
    bounds = torch.linspace(0, k.shape[-2], num_splits + 1).round().long().tolist()
    parts = [
        flash_attention(q, k[..., a:b, :], v[..., a:b, :], scale=scale)
        for a, b in pairwise(bounds)
        if b > a
    ]
    return merge_partials([o for o, _ in parts], [lse for _, lse in parts])


# --8<-- [end:merge]


# --8<-- [start:hbm]
@dataclass(frozen=True)
class AttentionShape:
    """One attention layer's call: who attends to what, and in which element size."""

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    dtype_bytes: int = 2  # fp16 / bf16
    causal: bool = True

    def keys_seen(self, row: int) -> int:
        """How many keys query row `row` attends to (bottom-right causal, or all)."""
        return min(self.kv_len, self.kv_len - self.q_len + row + 1) if self.causal else self.kv_len


def attention_flops(shape: AttentionShape) -> int:
    """FLOPs of the two matmuls (Q Kᵀ and P V) over the (query, key) pairs that count."""
    pairs = sum(shape.keys_seen(row) for row in range(shape.q_len))
    return 4 * pairs * shape.head_dim * shape.q_heads * shape.batch


def naive_hbm_bytes(shape: AttentionShape) -> int:
    """Bytes a standard (unfused) attention moves to and from HBM.

    Per query head: read Q, K, V once and write O once; then the full
    (q_len, kv_len) score matrix is written (Q Kᵀ), read (softmax), written again
    (the probabilities P) and read again (P V): four passes over N x N elements,
    all of them even when causal, since the mask is applied after Q Kᵀ.
    """
    io = (2 * shape.q_len + 2 * shape.kv_len) * shape.head_dim
    scores = 4 * shape.q_len * shape.kv_len
    return (io + scores) * shape.dtype_bytes * shape.q_heads * shape.batch


def tiled_hbm_bytes(shape: AttentionShape, block_m: int = 128) -> int:
    """Bytes FlashAttention's forward moves to and from HBM, with no help from the L2 cache.

    Per query head: read Q once, write O once and one float32 LSE per row; each tile of
    `block_m` queries reads the K and V rows it needs (all of them, or when causal, up to
    its last row's position). With `block_m >= q_len` that is one pass: every input read once.
    """
    kv_rows = sum(
        shape.keys_seen(min(m0 + block_m, shape.q_len) - 1) for m0 in range(0, shape.q_len, block_m)
    )
    elements = 2 * shape.q_len * shape.head_dim + 2 * kv_rows * shape.head_dim
    per_head = elements * shape.dtype_bytes + 4 * shape.q_len
    return per_head * shape.q_heads * shape.batch


# --8<-- [end:hbm]
