"""PagedAttention: attention over keys and values kept in fixed-size blocks.

A serving engine does not give each sequence one contiguous cache. It cuts the
KV memory of a layer into blocks of `block_size` positions,

    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]

and a sequence's *block table* lists the blocks holding its positions in
order: position p lives in slot ``p % block_size`` of block
``block_table[p // block_size]`` (Kwon et al., "Efficient Memory Management for
Large Language Model Serving with PagedAttention", SOSP 2023, arXiv:2309.06180).
Attention reads through that table; nothing else changes.

Batches are packed, as a serving engine runs them: the new tokens of every
sequence in one row, `q` of shape ``[num_tokens, num_heads, head_dim]``,
sequence b owning rows ``query_start[b] .. query_start[b+1] - 1``. A sequence
has `seq_lens[b]` keys in the cache, its new tokens' included; they are its
last positions, so its query i sits at position ``seq_lens[b] - q_len + i``
and sees keys up to there (causal, bottom-right aligned).

Four implementations, one contract:

* `paged_attention` is the reference: one sequence at a time, gather its
  blocks into order, attend. A prompt chunk and a decode token alike.
* `paged_decode_attention` is what the engine runs on the CPU for decode
  tokens (one query per sequence): every sequence at once, its blocks gathered
  into a padded batch, positions past its length masked.
* `paged_verify_attention` is the same for a few queries per sequence, a decode
  token and the guesses after it (speculative decoding): the queries are padded
  too, each masked past its own position.
* `llmserve_ref.kernels.triton_paged_attention` never gathers: each program
  walks one sequence's block table and reads every block where it lies.

>>> import torch
>>> k_cache = torch.zeros(4, 2, 1, 1)  # 4 blocks of 2 positions, 1 KV head, head_dim 1
>>> v_cache = torch.arange(8.0).view(4, 2, 1, 1)  # block 3 holds the values 6 and 7
>>> q = torch.zeros(1, 1, 1)  # one decode token; equal scores: the mean of the values
>>> paged_decode_attention(q, k_cache, v_cache, torch.tensor([[3, 0]]), torch.tensor([3]))
tensor([[[4.3333]]])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from llmserve_ref.kernels.grouped_attention import grouped_attention


# --8<-- [start:gather]
def gather_kv(cache: Tensor, block_table: Tensor, length: int) -> Tensor:
    """The first `length` positions of one sequence, in order: ``[length, kv_heads, head_dim]``.

    `cache` is one layer's keys or values, ``[num_blocks, block_size, kv_heads, head_dim]``;
    `block_table` lists the sequence's blocks (entries past its length are ignored).
    """
    blocks = cache[block_table[: -(-length // cache.shape[1])]]  # its blocks, in order
    return blocks.flatten(0, 1)[:length]  # [blocks * block_size, ...], cut to its length


# --8<-- [end:gather]


# --8<-- [start:reference]
def paged_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    query_start: Tensor,
) -> Tensor:
    """Causal attention of packed queries over paged KV, one sequence at a time.

    q ``[num_tokens, heads, d]``; `block_tables` ``[batch, max_blocks]``; `seq_lens` and
    `query_start` (``[batch]`` and ``[batch + 1]``) as in the module docstring.
    Returns ``[num_tokens, heads, d]``.
    """
    out = torch.empty_like(q)
    for b, seq_len in enumerate(seq_lens.tolist()):
        start, end = query_start[b].item(), query_start[b + 1].item()
        k = gather_kv(k_cache, block_tables[b], seq_len)  # [S, kv_heads, d]
        v = gather_kv(v_cache, block_tables[b], seq_len)
        positions = torch.arange(seq_len - (end - start), seq_len, device=q.device)
        # grouped_attention takes [batch, heads, T, d]: this sequence is a batch of one.
        o = grouped_attention(
            q[start:end].transpose(0, 1)[None],
            k.transpose(0, 1)[None],
            v.transpose(0, 1)[None],
            positions,
        )
        out[start:end] = o[0].transpose(0, 1)
    return out


# --8<-- [end:reference]


# --8<-- [start:decode]
def paged_decode_attention(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, seq_lens: Tensor
) -> Tensor:
    """One query per sequence (decode), all sequences at once: ``[batch, heads, d]``.

    Each sequence's blocks are gathered into a padded ``[batch, max_blocks * block_size]``
    batch of keys and values, and the positions past its length are masked out; PyTorch's
    fused attention (SDPA) does the rest, GQA included.
    """
    k = k_cache[block_tables].flatten(1, 2).transpose(1, 2)  # [batch, kv_heads, S_max, d]
    v = v_cache[block_tables].flatten(1, 2).transpose(1, 2)
    visible = torch.arange(k.shape[2], device=q.device) < seq_lens[:, None]  # [batch, S_max]
    out = F.scaled_dot_product_attention(
        q[:, :, None], k, v, attn_mask=visible[:, None, None, :], enable_gqa=True
    )  # one query: [batch, heads, 1, d]
    return out[:, :, 0]


# --8<-- [end:decode]


# --8<-- [start:verify]
def paged_verify_attention(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    query_start: Tensor,
) -> Tensor:
    """A few queries per sequence, all sequences at once: a decode token and its guesses.

    Speculative decoding scores each sequence's newest token and the guesses after it
    (`query_start` as in `paged_attention`, each sequence's queries its last positions).
    As in `paged_decode_attention` the blocks are gathered into one padded batch; the
    queries are padded too, to the longest sequence's, and each query sees the keys up
    to its own position. Returns ``[num_tokens, heads, d]``, packed as `q` is.
    """
    q_lens = query_start[1:] - query_start[:-1]  # [batch]
    rows = torch.arange(int(q_lens.max()), device=q.device)  # [width]
    # Query i of sequence b; a padding row repeats the sequence's last query.
    i = torch.minimum(rows, q_lens[:, None] - 1)  # [batch, width]
    padded = q[query_start[:-1, None] + i].transpose(1, 2)  # [batch, heads, width, d]
    k = k_cache[block_tables].flatten(1, 2).transpose(1, 2)  # [batch, kv_heads, S_max, d]
    v = v_cache[block_tables].flatten(1, 2).transpose(1, 2)
    position = seq_lens[:, None] - q_lens[:, None] + i  # [batch, width]: each query's own
    visible = torch.arange(k.shape[2], device=q.device) <= position[..., None]
    out = F.scaled_dot_product_attention(
        padded, k, v, attn_mask=visible[:, None], enable_gqa=True
    )  # [batch, heads, width, d]
    return out.transpose(1, 2)[rows < q_lens[:, None]]  # the real rows, in packed order


# --8<-- [end:verify]
