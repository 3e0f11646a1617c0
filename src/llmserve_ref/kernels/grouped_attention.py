"""The attention the tiny model runs: causal, grouped-query, with no copy of K or V.

Grouped-query attention (GQA, Ainslie et al. 2023) lets a group of query heads
share one key/value head. The obvious way to compute it repeats each K/V head
for its group, copying the cache; this one folds the group's query heads into
rows of one matrix instead, so each K/V head is read once, as it is stored.

Positions are absolute: a query at position p sees keys 0..p, so the same
function serves a whole prompt (T = S) and new tokens after a cache (T < S).

>>> import torch
>>> q, k = torch.ones(1, 4, 1, 8), torch.ones(1, 2, 3, 8)  # 4 query heads, 2 K/V heads
>>> v = torch.arange(3.0).view(1, 1, 3, 1).expand(1, 2, 3, 8)
>>> grouped_attention(q, k, v, positions=torch.tensor([2]))[0, :, 0, 0]  # mean of 0, 1, 2
tensor([1., 1., 1., 1.])
"""

from __future__ import annotations

import math

import torch


# --8<-- [start:grouped_attention]
def grouped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """``softmax(q kᵀ / √d + causal mask) v`` with each K/V head shared by a group of q heads.

    q is ``[batch, heads, T, d]`` at `positions`; k and v are ``[batch, kv_heads, S, d]``
    for positions ``0 .. S-1``. The ``group`` query heads that share a K/V head are folded
    into that head's rows, so one matmul per K/V head reads its keys and values once and
    no copy of K or V is made (broadcasting K over a group dimension would copy it).
    """
    batch, heads, T, d = q.shape
    kv_heads, S = k.shape[1], k.shape[2]
    group = heads // kv_heads
    q = q.reshape(batch, kv_heads, group * T, d)  # row g*T + t is query head (kv, g) at t
    scores = (q @ k.transpose(-1, -2) / math.sqrt(d)).view(batch, kv_heads, group, T, S)
    # Query at position p may see keys at positions 0..p. With a cache, S > T.
    visible = torch.arange(S, device=q.device) <= positions.unsqueeze(-1)  # [T, S]
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
    out = probs.view(batch, kv_heads, group * T, S) @ v  # [b, kv, group*T, d]
    return out.view(batch, heads, T, d)


# --8<-- [end:grouped_attention]
