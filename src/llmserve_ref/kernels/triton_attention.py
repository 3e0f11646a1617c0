"""FlashAttention in Triton: a forward kernel for prefill and a split-KV kernel for decode.

`flash_attention_forward(q, k, v, causal)` is the algorithm of `flash_attention.py`
as a GPU kernel: one program per (tile of queries, batch, query head), streaming
tiles of keys and values, the online softmax kept in registers. It handles
grouped-query attention, any `q_len <= kv_len` (chunked prefill against a cache;
causal masks are bottom-right aligned, as in `flash_attention.py`), ragged
lengths, head dims 16 to 128, and float32 / float16 / bfloat16.

`flash_decode(q, k, v, num_splits)` is flash-decoding: with one new query per
sequence there is only one query tile per head, too little work to fill a GPU,
so the cache is cut into `num_splits` partitions that run in parallel, and a
second small kernel merges the partial results with their log-sum-exps.

Both return the output and the log-sum-exp (natural log, float32) per query row.

Where it runs. On CUDA the kernels compile. On the CPU they run under Triton's
interpreter, which must be switched on with `TRITON_INTERPRET=1` *before* Python
imports this module (the nox `cpu` session does); bfloat16 is refused there,
because numpy has no bfloat16 and the interpreter computes garbage without a
word. Triton has no macOS wheels: this module still imports, `TRITON_AVAILABLE`
is False, and the kernels raise an error that points to the pure-PyTorch
reference in `llmserve_ref.kernels.flash_attention`. `why_triton_cannot_run(device)`
says in one sentence why the kernels cannot run on a device, or returns None.

The decode split plan is plain arithmetic, the same everywhere:

>>> plan_splits(kv_len=1000, num_splits=4, block_n=64)
(256, 4)
>>> plan_splits(kv_len=100, num_splits=8, block_n=64)  # never an empty partition
(64, 2)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from llmserve_ref.kernels.flash_attention import check_attention_args

try:
    import triton
    import triton.language as tl

    TRITON_AVAILABLE = True
except ImportError:  # Triton ships Linux wheels only

    class _NoTriton:
        """Stands in for `triton` so the kernels below can be defined (never run) without it."""

        @staticmethod
        def jit(fn):
            return fn

    triton = tl = _NoTriton()
    TRITON_AVAILABLE = False

LOG2E = 1.4426950408889634  # kernels use exp2: exp(x) = exp2(x * log2(e))
HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# fmt: off
# --8<-- [start:forward-kernel]
@triton.jit
def _flash_forward_kernel(
    Q, K, V, Out, LSE,  # pointers; LSE is (batch * q_heads, q_len), contiguous
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    q_heads, q_len, kv_len, qk_scale,  # qk_scale = softmax scale * log2(e)
    GROUP: tl.constexpr,  # query heads per KV head (1 = MHA)
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
):
    # This program owns one tile of BLOCK_M queries of one (sequence, query head).
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // q_heads
    h = bh % q_heads
    kv_h = h // GROUP  # GQA: GROUP consecutive query heads read the same K and V

    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows < q_len  # the last tile may hang past the end: mask every access

    q_ptrs = (Q + b * stride_qb + h * stride_qh
              + rows[:, None] * stride_qm + dims[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    k_base = K + b * stride_kb + kv_h * stride_kh
    v_base = V + b * stride_vb + kv_h * stride_vh

    # The online softmax's state, one entry per query row, in float32 registers.
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max (log2 units)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # running sum of exp2(s - m_i) @ V

    # Bottom-right causal: query row i is at position offset + i; a tile stops at its last row.
    offset = kv_len - q_len
    kv_end = kv_len
    if CAUSAL:
        kv_end = tl.minimum(kv_len, offset + (tile + 1) * BLOCK_M)

    for n0 in range(0, kv_end, BLOCK_N):
        keys = n0 + cols
        key_ok = keys < kv_len
        # K is loaded transposed, (HEAD_DIM, BLOCK_N), so that q @ k is the score tile.
        k = tl.load(k_base + keys[None, :] * stride_kn + dims[:, None] * stride_kd,
                    mask=key_ok[None, :], other=0.0)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= offset + rows[:, None])
        s = tl.where(visible, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)  # rescales everything summed under the old max
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=key_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    acc = acc / l_i[:, None]
    o_ptrs = (Out + b * stride_ob + h * stride_oh
              + rows[:, None] * stride_om + dims[None, :] * stride_od)
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=row_ok[:, None])
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # times ln 2: back to natural log
    tl.store(LSE + bh * q_len + rows, lse, mask=row_ok)
# --8<-- [end:forward-kernel]
# fmt: on


# fmt: off
# --8<-- [start:decode-kernels]
@triton.jit
def _decode_split_kernel(
    Q, K, V, O_PART, LSE_PART,  # O_PART: (batch * q_heads, splits, HEAD_DIM) float32
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    q_heads, kv_len, split_len, num_splits, qk_scale,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # One program: one (sequence, query head) against one partition of its cache.
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // q_heads
    h = bh % q_heads
    kv_h = h // GROUP
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)

    q = tl.load(Q + b * stride_qb + h * stride_qh + dims * stride_qd).to(tl.float32)
    k_base = K + b * stride_kb + kv_h * stride_kh
    v_base = V + b * stride_vb + kv_h * stride_vh
    start = split * split_len
    end = tl.minimum(start + split_len, kv_len)

    # The same online softmax as the forward kernel, for a single query row.
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        keys = n0 + cols
        key_ok = keys < end
        k = tl.load(k_base + keys[:, None] * stride_kn + dims[None, :] * stride_kd,
                    mask=key_ok[:, None], other=0.0).to(tl.float32)
        s = tl.where(key_ok, tl.sum(q[None, :] * k, 1) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        v = tl.load(v_base + keys[:, None] * stride_vn + dims[None, :] * stride_vd,
                    mask=key_ok[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new

    # Each partition's output is normalized over its own keys; its LSE says how much they weigh.
    part = bh * num_splits + split
    tl.store(O_PART + part * HEAD_DIM + dims, acc / l_i)
    tl.store(LSE_PART + part, (m_i + tl.log2(l_i)) * 0.6931471805599453)


@triton.jit
def _decode_merge_kernel(
    O_PART, LSE_PART, Out, LSE,  # Out: (batch * q_heads, HEAD_DIM), LSE: (batch * q_heads,)
    num_splits, HEAD_DIM: tl.constexpr, SPLITS: tl.constexpr,  # SPLITS: a power of 2 >= splits
):
    bh = tl.program_id(0)
    splits = tl.arange(0, SPLITS)
    dims = tl.arange(0, HEAD_DIM)
    split_ok = splits < num_splits

    lse = tl.load(LSE_PART + bh * num_splits + splits, mask=split_ok, other=float("-inf"))
    lse_max = tl.max(lse, 0)
    weight = tl.exp(lse - lse_max)  # each partition's share, up to a common factor
    total = tl.sum(weight, 0)
    o = tl.load(O_PART + (bh * num_splits + splits[:, None]) * HEAD_DIM + dims[None, :],
                mask=split_ok[:, None], other=0.0)
    out = tl.sum(weight[:, None] * o, 0) / total
    tl.store(Out + bh * HEAD_DIM + dims, out.to(Out.dtype.element_ty))
    tl.store(LSE + bh, lse_max + tl.log(total))
# --8<-- [end:decode-kernels]
# fmt: on


def interpreted() -> bool:
    """Whether the kernels were wrapped by Triton's interpreter when this module was imported."""
    return TRITON_AVAILABLE and type(_flash_forward_kernel).__name__ == "InterpretedFunction"


def why_triton_cannot_run(device: torch.device | str) -> str | None:
    """One sentence saying why the Triton kernels cannot run on `device`, or None if they can.

    >>> why_triton_cannot_run("mps")
    'Triton does not run on Apple GPUs (mps); use llmserve_ref.kernels.flash_attention...'
    """
    kind = torch.device(device).type
    if kind == "mps":
        return (
            "Triton does not run on Apple GPUs (mps); use "
            "llmserve_ref.kernels.flash_attention, the PyTorch reference"
        )
    if not TRITON_AVAILABLE:
        return (
            "Triton is not installed (it has Linux wheels only: pip install triton); "
            "use llmserve_ref.kernels.flash_attention, the PyTorch reference"
        )
    if kind == "cpu" and not interpreted():
        return (
            "on the CPU the Triton kernels run only in Triton's interpreter: set "
            "TRITON_INTERPRET=1 before starting Python (the nox cpu session does)"
        )
    if kind not in ("cpu", "cuda"):
        return f"the Triton kernels run on cuda (or on the cpu, interpreted), not on {kind}"
    return None


def _check_runnable(*tensors: Tensor) -> None:
    # equivalent mutants: devices all equal, or the same error lists them all
    device = tensors[0].device  # pragma: no mutate
    if any(t.device != device for t in tensors):
        raise ValueError(
            f"all tensors must be on one device; got {', '.join(str(t.device) for t in tensors)}"
        )
    reason = why_triton_cannot_run(device)
    if reason is not None:
        raise RuntimeError(reason)
    # equivalent mutants: dtypes all equal, or the same error lists them all
    dtype = tensors[0].dtype  # pragma: no mutate
    if dtype not in DTYPES or any(t.dtype != dtype for t in tensors):
        raise ValueError(
            f"q, k, v must share one dtype among float32, float16, bfloat16; got "
            f"{', '.join(str(t.dtype) for t in tensors)}"
        )
    if dtype == torch.bfloat16 and interpreted():
        raise ValueError(
            "bfloat16 is refused under the Triton interpreter (TRITON_INTERPRET=1): numpy has "
            "no bfloat16, so the interpreter would return garbage without an error. Pass "
            "float16 or float32 on the CPU, or run bfloat16 on a CUDA GPU"
        )
    head_dim = tensors[0].shape[-1]
    if head_dim not in HEAD_DIMS:
        raise ValueError(
            f"head_dim={head_dim} is not supported; the kernels take "
            f"{', '.join(map(str, HEAD_DIMS))} (pad the head dim up to one of them)"
        )


def _check_block(name: str, value: int) -> None:
    if value < 16 or value & (value - 1):
        raise ValueError(f"{name}={value} must be a power of two >= 16 (tl.dot's smallest tile)")


def flash_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    scale: float | None = None,
    block_m: int = 64,
    block_n: int = 64,
) -> tuple[Tensor, Tensor]:
    """Run the Triton forward kernel: the attention output and the LSE of each query row.

    q is (batch, q_heads, q_len, head_dim); k and v are (batch, kv_heads, kv_len, head_dim)
    with kv_heads dividing q_heads. Causal masks are bottom-right aligned (q_len <= kv_len).
    """
    _check_runnable(q, k, v)
    group = check_attention_args(q, k, v, causal)
    _check_block("block_m", block_m)
    _check_block("block_n", block_n)
    batch, q_heads, q_len, head_dim = q.shape
    kv_len = k.shape[2]
    scale = head_dim**-0.5 if scale is None else scale
    out = torch.empty_like(q)
    lse = torch.empty(batch, q_heads, q_len, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(q_len, block_m), batch * q_heads)
    _flash_forward_kernel[grid](
        q, k, v, out, lse,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        q_heads, q_len, kv_len, scale * LOG2E,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=4 if head_dim <= 64 else 8, num_stages=2,
    )  # fmt: skip
    return out, lse


def plan_splits(kv_len: int, num_splits: int, block_n: int) -> tuple[int, int]:
    """(keys per partition, partitions): about `num_splits` equal parts, whole blocks each.

    A partition is a whole number of `block_n` blocks and none is empty, so there may be
    fewer partitions than asked for when the cache is short.
    """
    if num_splits < 1:
        raise ValueError(f"num_splits={num_splits}; split the cache into at least 1 partition")
    split_len = math.ceil(math.ceil(kv_len / num_splits) / block_n) * block_n
    return split_len, math.ceil(kv_len / split_len)


def flash_decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    num_splits: int | None = None,
    scale: float | None = None,
    block_n: int = 64,
) -> tuple[Tensor, Tensor]:
    """Flash-decoding: one query per sequence against its whole KV cache, split and merged.

    q is (batch, q_heads, 1, head_dim), k and v (batch, kv_heads, kv_len, head_dim).
    `num_splits` defaults to one partition per 512 keys, at most 16: enough programs to
    occupy a GPU's ~100 SMs for a batch of a few sequences. Returns (out, lse) shaped like
    `flash_attention_forward`'s.
    """
    _check_runnable(q, k, v)
    group = check_attention_args(q, k, v, causal=False)
    if q.shape[2] != 1:
        raise ValueError(
            f"flash_decode takes one query per sequence (q_len=1), got "
            f"q_len={q.shape[2]}; use flash_attention_forward(causal=True) for a "
            "chunk of several new tokens"
        )
    _check_block("block_n", block_n)
    batch, q_heads, _, head_dim = q.shape
    kv_len = k.shape[2]
    scale = head_dim**-0.5 if scale is None else scale
    if num_splits is None:
        num_splits = min(16, math.ceil(kv_len / 512))
    split_len, num_splits = plan_splits(kv_len, num_splits, block_n)

    o_part = torch.empty(
        batch * q_heads, num_splits, head_dim, dtype=torch.float32, device=q.device
    )
    lse_part = torch.empty(batch * q_heads, num_splits, dtype=torch.float32, device=q.device)
    _decode_split_kernel[(batch * q_heads, num_splits)](
        q, k, v, o_part, lse_part,
        q.stride(0), q.stride(1), q.stride(3), *k.stride(), *v.stride(),
        q_heads, kv_len, split_len, num_splits, scale * LOG2E,
        GROUP=group, HEAD_DIM=head_dim, BLOCK_N=block_n,
    )  # fmt: skip
    out = torch.empty(batch, q_heads, 1, head_dim, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, q_heads, 1, dtype=torch.float32, device=q.device)
    _decode_merge_kernel[(batch * q_heads,)](
        o_part, lse_part, out, lse, num_splits,
        HEAD_DIM=head_dim, SPLITS=triton.next_power_of_2(num_splits),
    )  # fmt: skip
    return out, lse
