"""Paged decode attention in Triton: every K/V block is read where it lies in the pool.

The PyTorch code in `paged_attention.py` *gathers*: `k_cache[block_tables]` copies every
sequence's blocks, in order, into a new tensor padded to the longest block table, and
attention runs on that copy. The copy is at least as large as the batch's whole cache, and
it is written to memory and read back before a single score is computed. This kernel never
makes it. Each program reads the block table, one integer per block, and loads the keys
and values straight from the block they name, wherever the block manager put it:

    k_cache, v_cache:  [num_blocks, block_size, num_kv_heads, head_dim]   the pool
    block_tables:      [batch, max_blocks]   sequence b's i-th block is block_tables[b, i]
    q, output:         [batch, heads, head_dim]   one new query per sequence

One program per (sequence, KV head). With grouped-query attention the
``heads // kv_heads`` query heads that share a KV head are one program's rows, so every
K/V block is loaded once per group, not once per query head. The program walks the sequence's blocks
in order:

1. load the physical block id, ``block_tables[b, i]``;
2. load that block's ``[block_size, head_dim]`` tile of keys, score it against the group's
   queries, and mask the positions at or past `seq_len` (the last block may be partly full);
3. fold the scores into an online softmax (running max, running sum, running output, in
   float32, with `exp2` as in `triton_attention.py`), then load the block's values.

The query is the sequence's newest token, at position ``seq_len - 1``: it sees every key
in the cache, so no causal mask is needed, only the length. The result is
`paged_decode_attention`'s, in q's dtype.

There is no split-KV here: one sequence is `kv_heads` programs, enough to fill a GPU when
the batch is large. With few, long sequences a GPU sits mostly idle; `flash_decode` in
`triton_attention.py` shows the cure (split each cache into partitions that run in
parallel, then merge them by their log-sum-exps), and it applies to a block table unchanged.

Where it runs is as for `triton_attention.py`: compiled on CUDA, in Triton's interpreter
on the CPU under `TRITON_INTERPRET=1` (set before Python starts; bfloat16 refused there),
never on mps. Arguments are checked before anything runs, so a mistake reads the same
everywhere:

>>> q = torch.zeros(1, 4, 16)  # one sequence, 4 query heads, head_dim 16
>>> pool = torch.zeros(8, 3, 2, 16)  # 8 blocks of 3 positions, 2 KV heads
>>> paged_decode_attention_triton(q, pool, pool, torch.tensor([[5, 2]]), torch.tensor([4]))
Traceback (most recent call last):
...
ValueError: block_size=3 is not a power of two; ...
>>> pool = torch.zeros(8, 4, 2, 16)  # blocks of 4 positions: 2 blocks hold 8 of them
>>> paged_decode_attention_triton(q, pool, pool, torch.tensor([[5, 2]]), torch.tensor([9]))
Traceback (most recent call last):
...
ValueError: seq_lens[0]=9 but its block table holds 2 blocks of 4 = 8 positions; ...
"""

from __future__ import annotations

import torch
from torch import Tensor

# The stand-in for a missing Triton, the interpreter switch, its helpers, the dtypes: one home.
from llmserve_ref.kernels.triton_attention import (
    DTYPES,
    LOG2E,
    interpreted,
    tl,
    triton,
    why_triton_cannot_run,
)

INDEX_DTYPES = (torch.int32, torch.int64)


# fmt: off
# --8<-- [start:kernel]
@triton.jit
def _paged_decode_kernel(
    Q,  # [batch, heads, head_dim]
    K_CACHE,  # [num_blocks, block_size, kv_heads, head_dim]
    V_CACHE,  # [num_blocks, block_size, kv_heads, head_dim]
    BLOCK_TABLES,  # [batch, max_blocks], int32 or int64
    SEQ_LENS,  # [batch]
    Out,  # [batch, heads, head_dim]
    stride_qb, stride_qh, stride_qd,
    stride_kn, stride_ks, stride_kh, stride_kd,  # n: block, s: slot in the block
    stride_vn, stride_vs, stride_vh, stride_vd,
    stride_tb, stride_ti,  # block table: sequence, i-th block
    stride_sb,
    stride_ob, stride_oh, stride_od,
    qk_scale,  # softmax scale * log2(e)
    GROUP: tl.constexpr,  # query heads per KV head (1 = MHA, heads = MQA)
    GROUP_P2: tl.constexpr,  # GROUP rounded up to a power of two (tl.arange needs one)
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P2: tl.constexpr,  # HEAD_DIM rounded up likewise; the padding is masked
    BLOCK_SIZE: tl.constexpr,  # positions per cache block, a power of two
):  # fmt: skip
    # This program owns one sequence b and one KV head, and the GROUP query heads that read it.
    b = tl.program_id(0)
    kv_h = tl.program_id(1)
    rows = tl.arange(0, GROUP_P2)  # the group's query heads are kv_h * GROUP + rows
    slots = tl.arange(0, BLOCK_SIZE)  # the positions of one block
    dims = tl.arange(0, HEAD_DIM_P2)
    row_ok = rows < GROUP
    dim_ok = dims < HEAD_DIM

    q_ptrs = (Q + b * stride_qb + (kv_h * GROUP + rows[:, None]) * stride_qh
              + dims[None, :] * stride_qd)  # fmt: skip
    q = tl.load(q_ptrs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    q = q.to(tl.float32) * qk_scale  # [GROUP_P2, HEAD_DIM_P2], scaled once for every key

    seq_len = tl.load(SEQ_LENS + b * stride_sb)
    table = BLOCK_TABLES + b * stride_tb  # this sequence's row of the block table
    k_head = K_CACHE + kv_h * stride_kh  # this KV head, in whichever block
    v_head = V_CACHE + kv_h * stride_vh

    # The online softmax's state, one entry per query head of the group, in float32.
    m_i = tl.full([GROUP_P2], float("-inf"), tl.float32)  # running max (log2 units)
    l_i = tl.zeros([GROUP_P2], tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([GROUP_P2, HEAD_DIM_P2], tl.float32)  # running sum of exp2(s - m_i) * V

    for i in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):  # the sequence's blocks, in order
        # Where its i-th block lies in the pool. int64: block * stride_kn can pass 2**31.
        block = tl.load(table + i * stride_ti).to(tl.int64)
        key_ok = i * BLOCK_SIZE + slots < seq_len  # the last block may be partly full
        tile_ok = key_ok[:, None] & dim_ok[None, :]
        tile = block * stride_kn + slots[:, None] * stride_ks + dims[None, :] * stride_kd
        k = tl.load(k_head + tile, mask=tile_ok, other=0.0).to(tl.float32)  # [BLOCK, D_P2]

        # Scores [GROUP_P2, BLOCK_SIZE]: a product and a sum over head_dim, not tl.dot,
        # which wants 16 rows or more; a decode group has 1 to 8.
        s = tl.sum(q[:, None, :] * k[None, :, :], 2)
        s = tl.where(key_ok[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))  # block 0 holds position 0: never -inf after it
        alpha = tl.exp2(m_i - m_new)  # rescales everything summed under the old max
        p = tl.exp2(s - m_new[:, None])  # [GROUP_P2, BLOCK_SIZE]
        l_i = l_i * alpha + tl.sum(p, 1)
        tile = block * stride_vn + slots[:, None] * stride_vs + dims[None, :] * stride_vd
        v = tl.load(v_head + tile, mask=tile_ok, other=0.0).to(tl.float32)  # [BLOCK, D_P2]
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)
        m_i = m_new

    out = acc / l_i[:, None]  # normalize once, at the end
    o_ptrs = (Out + b * stride_ob + (kv_h * GROUP + rows[:, None]) * stride_oh
              + dims[None, :] * stride_od)  # fmt: skip
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


# --8<-- [end:kernel]
# fmt: on


def check_paged_decode_args(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, seq_lens: Tensor
) -> int:
    """Check a paged decode call's shapes and dtypes; return the GQA group size.

    These checks read only the tensors' metadata: they cost nothing on the GPU. The
    lengths and table entries are data, checked by `check_paged_decode_contents`.
    """
    if q.dim() != 3 or k_cache.dim() != 4:
        raise ValueError(
            f"q must be [batch, heads, head_dim] and the caches [num_blocks, block_size, "
            f"kv_heads, head_dim]; got q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}"
        )
    if v_cache.shape != k_cache.shape:
        raise ValueError(
            f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must have "
            "the same shape"
        )
    batch, heads, head_dim = q.shape
    _, block_size, kv_heads, cache_dim = k_cache.shape
    if head_dim != cache_dim:
        raise ValueError(f"q has head_dim {head_dim} but the caches {cache_dim}")
    if heads % kv_heads:
        raise ValueError(
            f"{heads} query heads is not a multiple of {kv_heads} KV heads; with GQA every "
            "KV head serves the same number of query heads"
        )
    if block_size < 1 or block_size & (block_size - 1):
        raise ValueError(
            f"block_size={block_size} is not a power of two; the kernel loads a block as one "
            "tile, and Triton tiles have power-of-two sides (use 8, 16, 32, ...)"
        )
    if block_tables.dim() != 2 or block_tables.shape[0] != batch or seq_lens.shape != (batch,):
        raise ValueError(
            f"block_tables must be [batch, max_blocks] and seq_lens [batch], batch={batch}; "
            f"got {tuple(block_tables.shape)} and {tuple(seq_lens.shape)}"
        )
    _check_dtypes_and_device(q, k_cache, v_cache, block_tables, seq_lens)
    return heads // kv_heads


def _check_dtypes_and_device(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, block_tables: Tensor, seq_lens: Tensor
) -> None:
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(
            f"q, k_cache, v_cache must share one dtype among float32, float16, bfloat16; "
            f"got {q.dtype}, {k_cache.dtype}, {v_cache.dtype}"
        )
    if block_tables.dtype not in INDEX_DTYPES or seq_lens.dtype not in INDEX_DTYPES:
        raise ValueError(
            f"block_tables and seq_lens must be int32 or int64; got {block_tables.dtype} "
            f"and {seq_lens.dtype}"
        )
    devices = {t.device for t in (q, k_cache, v_cache, block_tables, seq_lens)}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device; got {sorted(map(str, devices))}")


def check_paged_decode_contents(
    block_tables: Tensor, seq_lens: Tensor, num_blocks: int, block_size: int
) -> None:
    """Check the lengths and the table entries a decode will read: every length at least 1
    and within its table, every used entry a block of the pool. Only the entries a sequence
    uses (the first ``ceil(seq_len / block_size)``) count: the rest are never read.

    These are data, so checking them reads the tensors back to the host: on a GPU, a
    synchronization. A production engine trusts its block manager and skips it
    (``check=False``); a test, a page or a first try should not.
    """
    capacity = block_tables.shape[1] * block_size
    for b, seq_len in enumerate(seq_lens.tolist()):
        if seq_len < 1:
            raise ValueError(
                f"seq_lens[{b}]={seq_len}: a decode query is the sequence's last cached "
                "position, so every sequence needs at least 1 (its own key and value)"
            )
        if seq_len > capacity:
            raise ValueError(
                f"seq_lens[{b}]={seq_len} but its block table holds {block_tables.shape[1]} "
                f"blocks of {block_size} = {capacity} positions; allocate its blocks first"
            )
    used = torch.arange(block_tables.shape[1], device=seq_lens.device)
    used = used < (seq_lens[:, None] + block_size - 1) // block_size  # [batch, max_blocks]
    bad = used & ((block_tables < 0) | (block_tables >= num_blocks))
    if bad.any():
        b, i = bad.nonzero()[0].tolist()
        raise ValueError(
            f"block_tables[{b}, {i}]={block_tables[b, i].item()} names no block of the pool "
            f"(num_blocks={num_blocks}); sequence {b} uses its first "
            f"{used[b].sum().item()} entries"
        )


def paged_decode_attention_triton(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    block_tables: Tensor,
    seq_lens: Tensor,
    check: bool = True,
) -> Tensor:
    """`paged_decode_attention` as one Triton kernel that reads the blocks in place.

    q ``[batch, heads, head_dim]``, one new token per sequence at position
    ``seq_lens[b] - 1``; the caches ``[num_blocks, block_size, kv_heads, head_dim]``;
    `block_tables` ``[batch, max_blocks]``. Returns ``[batch, heads, head_dim]`` in q's dtype.
    `check` also checks the lengths and table entries (`check_paged_decode_contents`),
    which synchronizes a GPU: the engine's hot path turns it off.
    """
    group = check_paged_decode_args(q, k_cache, v_cache, block_tables, seq_lens)
    if check:
        check_paged_decode_contents(block_tables, seq_lens, *k_cache.shape[:2])
    reason = why_triton_cannot_run(q.device)
    if reason is not None:
        raise RuntimeError(reason)
    if q.dtype == torch.bfloat16 and interpreted():
        raise ValueError(
            "bfloat16 is refused under the Triton interpreter (TRITON_INTERPRET=1): numpy has "
            "no bfloat16, so the interpreter would return garbage without an error. Pass "
            "float16 or float32 on the CPU, or run bfloat16 on a CUDA GPU"
        )
    batch, _, head_dim = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    grid = (batch, kv_heads)  # one program per (sequence, KV head)
    _paged_decode_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, out,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        seq_lens.stride(0), *out.stride(),
        head_dim**-0.5 * LOG2E,
        GROUP=group, GROUP_P2=triton.next_power_of_2(group),
        HEAD_DIM=head_dim, HEAD_DIM_P2=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=block_size,
    )  # fmt: skip
    return out
