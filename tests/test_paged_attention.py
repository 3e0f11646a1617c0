"""Paged attention against SDPA: the reference, the batched decode, and the Triton kernel.

Every test draws each sequence's keys and values as contiguous tensors, computes the oracle
(`sdpa_attention`, float64, bottom-right causal) on them, and only then scatters them into
random blocks of a pool through a random block table: the oracle never sees a block table.
Pool slots that no sequence owns, and block table entries past a sequence's blocks, hold
NaN and -1, so a read past a sequence's length shows; `paged_decode_attention` is the
exception, as it reads every entry of the table and whole blocks (see `make_batch`).

The Triton kernel runs compiled on CUDA and in Triton's interpreter on the CPU, which needs
TRITON_INTERPRET=1 before Python starts (the nox cpu session sets it); without it, and on
mps, its tests skip and say why.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_flash_attention import assert_close
from torch import Tensor

from llmserve_ref.device import get_device
from llmserve_ref.kernels import triton_paged_attention
from llmserve_ref.kernels.flash_attention import sdpa_attention
from llmserve_ref.kernels.paged_attention import (
    gather_kv,
    paged_attention,
    paged_decode_attention,
)
from llmserve_ref.kernels.triton_attention import interpreted, why_triton_cannot_run
from llmserve_ref.kernels.triton_paged_attention import paged_decode_attention_triton

DEVICE = get_device()
CANNOT_RUN = why_triton_cannot_run(DEVICE)
needs_triton = pytest.mark.skipif(CANNOT_RUN is not None, reason=f"Triton kernels: {CANNOT_RUN}")
# float16 and bfloat16 are checked where they are computed for real: compiled on CUDA.
TRITON_DTYPES = [torch.float32] + ([torch.float16, torch.bfloat16] if DEVICE.type == "cuda" else [])

HEADS = 4
KV_HEADS = [4, 2, 1]  # MHA, GQA (2 query heads per KV head), MQA
# (seq_len, q_len): a first token alone, decode tokens at lengths that are and are not
# multiples of the block sizes, a whole prompt, and a chunk of a prompt after cached keys.
MIXED = [(1, 1), (7, 1), (9, 9), (16, 1), (30, 5), (33, 1)]
DECODE_LENS = [1, 7, 16, 33]


@dataclass
class Batch:
    """A packed batch in the paged layout, and SDPA's answer computed without the pages."""

    q: Tensor  # [num_tokens, heads, head_dim], sequence b owns query_start[b]:query_start[b+1]
    k_cache: Tensor  # [num_blocks, block_size, kv_heads, head_dim]
    v_cache: Tensor
    block_tables: Tensor  # [batch, max_blocks]
    seq_lens: Tensor  # [batch]
    query_start: Tensor  # [batch + 1]
    expected: Tensor  # [num_tokens, heads, head_dim], float64 on the CPU


def make_batch(
    seqs: list[tuple[int, int]],
    kv_heads: int,
    block_size: int,
    *,
    heads: int = HEADS,
    head_dim: int = 16,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    whole_blocks: bool = False,
) -> Batch:
    """Sequences of (seq_len, q_len): contiguous K/V, the oracle, then a random paging.

    `whole_blocks` is for `paged_decode_attention`, which gathers every table entry and
    whole blocks and multiplies the masked positions' zero weights by their values: there
    the unused entries name real blocks and the unused slots hold large finite garbage
    (NaN would make 0 * NaN = NaN) instead of -1 and NaN.
    """
    gen = torch.Generator().manual_seed(seed)
    needed = [math.ceil(seq_len / block_size) for seq_len, _ in seqs]
    num_blocks = sum(needed) + 2  # and two blocks no sequence owns
    max_blocks = max(needed) + 1  # and a table column past every sequence's last block
    pool = (num_blocks, block_size, kv_heads, head_dim)
    if whole_blocks:
        k_cache, v_cache = (1e4 * torch.randn(pool, generator=gen) for _ in "kv")
        block_tables = torch.randint(num_blocks, (len(seqs), max_blocks), generator=gen)
    else:
        k_cache, v_cache = torch.full(pool, math.nan), torch.full(pool, math.nan)
        block_tables = torch.full((len(seqs), max_blocks), -1)
    k_cache, v_cache = k_cache.to(dtype), v_cache.to(dtype)
    owners = torch.randperm(num_blocks, generator=gen)  # the pool's blocks, dealt at random

    queries, expected = [], []
    for b, ((seq_len, q_len), n) in enumerate(zip(seqs, needed, strict=True)):
        q = torch.randn(1, heads, q_len, head_dim, generator=gen).to(dtype)
        k = torch.randn(1, kv_heads, seq_len, head_dim, generator=gen).to(dtype)
        v = torch.randn(1, kv_heads, seq_len, head_dim, generator=gen).to(dtype)
        out, _ = sdpa_attention(q, k, v, causal=True)  # the q_len newest positions
        expected.append(out[0].transpose(0, 1))  # [q_len, heads, head_dim]
        queries.append(q[0].transpose(0, 1))

        blocks = owners[sum(needed[:b]) : sum(needed[:b]) + n]
        block_tables[b, :n] = blocks
        positions = torch.arange(seq_len)  # position p: slot p % block_size of block p // bs
        k_cache[blocks[positions // block_size], positions % block_size] = k[0].transpose(0, 1)
        v_cache[blocks[positions // block_size], positions % block_size] = v[0].transpose(0, 1)

    q_lens = torch.tensor([0] + [q_len for _, q_len in seqs])
    return Batch(
        q=torch.cat(queries).to(DEVICE),
        k_cache=k_cache.to(DEVICE),
        v_cache=v_cache.to(DEVICE),
        block_tables=block_tables.to(DEVICE),
        seq_lens=torch.tensor([seq_len for seq_len, _ in seqs], device=DEVICE),
        query_start=q_lens.cumsum(0).to(DEVICE),
        expected=torch.cat(expected),
    )


def decode_seqs(seq_lens: list[int]) -> list[tuple[int, int]]:
    return [(seq_len, 1) for seq_len in seq_lens]


# --- gather_kv --------------------------------------------------------------------------


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    block_size=st.integers(1, 8),
    length=st.integers(1, 40),
    spare=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_gather_kv_returns_positions_in_order(block_size, length, spare, seed):
    gen = torch.Generator().manual_seed(seed)
    needed = math.ceil(length / block_size)
    num_blocks = needed + spare
    blocks = torch.randperm(num_blocks, generator=gen)[:needed]
    # Every element says where it belongs: position * 100 + kv_head * 10 + dim.
    cache = torch.full((num_blocks, block_size, 2, 3), -1.0)
    positions = torch.arange(length)
    layout = torch.arange(2)[:, None] * 10 + torch.arange(3)[None, :]  # [kv_heads, dim]
    want = positions[:, None, None] * 100.0 + layout  # [length, kv_heads, dim]
    cache[blocks[positions // block_size], positions % block_size] = want
    # An entry past the sequence's blocks is never read: it names no block at all.
    table = torch.cat([blocks, torch.tensor([num_blocks + 100])])
    assert torch.equal(gather_kv(cache, table, length), want)


# --- the PyTorch implementations --------------------------------------------------------


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_reference_mixed_batch_matches_sdpa(block_size, kv_heads):
    """Prompt chunks and decode tokens in one packed batch, bottom-right causal."""
    batch = make_batch(MIXED, kv_heads, block_size, seed=block_size * 10 + kv_heads)
    out = paged_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
        batch.query_start,
    )  # fmt: skip
    assert out.shape == batch.q.shape and out.dtype == batch.q.dtype
    assert_close(out, batch.expected, torch.float32)


@st.composite
def sequences(draw, decode: bool) -> list[tuple[int, int]]:
    """1 to 4 sequences of (seq_len, q_len): q_len 1 when decoding, else 1 to seq_len."""
    seq_lens = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    return [(n, 1 if decode else draw(st.integers(1, n))) for n in seq_lens]


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    seqs=sequences(decode=False),
    block_size=st.sampled_from([1, 2, 4, 16]),
    kv_heads=st.sampled_from(KV_HEADS),
    seed=st.integers(0, 2**16),
)
def test_reference_random_batches_match_sdpa(seqs, block_size, kv_heads, seed):
    batch = make_batch(seqs, kv_heads, block_size, head_dim=8, seed=seed)
    out = paged_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
        batch.query_start,
    )  # fmt: skip
    assert_close(out, batch.expected, torch.float32)


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_batched_decode_matches_sdpa(block_size, kv_heads):
    batch = make_batch(decode_seqs(DECODE_LENS), kv_heads, block_size, whole_blocks=True)
    out = paged_decode_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens
    )
    assert out.shape == batch.q.shape and out.dtype == batch.q.dtype
    assert_close(out, batch.expected, torch.float32)


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    seqs=sequences(decode=True),
    block_size=st.sampled_from([1, 2, 4, 16]),
    kv_heads=st.sampled_from(KV_HEADS),
    seed=st.integers(0, 2**16),
)
def test_batched_decode_random_batches_match_sdpa(seqs, block_size, kv_heads, seed):
    batch = make_batch(seqs, kv_heads, block_size, head_dim=8, seed=seed, whole_blocks=True)
    out = paged_decode_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens
    )
    assert_close(out, batch.expected, torch.float32)


# --- the Triton kernel ------------------------------------------------------------------


def run_triton(batch: Batch) -> Tensor:
    return paged_decode_attention_triton(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens
    )


@needs_triton
@pytest.mark.parametrize("dtype", TRITON_DTYPES, ids=str)
@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("block_size", [4, 16])
def test_triton_decode_matches_sdpa(block_size, kv_heads, dtype):
    seed = block_size * 10 + kv_heads
    batch = make_batch(decode_seqs(DECODE_LENS), kv_heads, block_size, head_dim=32,
                       dtype=dtype, seed=seed)  # fmt: skip
    out = run_triton(batch)
    assert out.shape == batch.q.shape and out.dtype == dtype
    assert_close(out, batch.expected, dtype)


@needs_triton
@pytest.mark.parametrize("block_size", [1, 2])
def test_triton_pads_group_and_head_dim(block_size):
    """A group of 3 query heads and head_dim 24 are padded to 4 and 32 inside the kernel,
    and blocks of 1 or 2 positions are tiles too."""
    seqs = decode_seqs([1, 5, 12])
    batch = make_batch(seqs, 2, block_size, heads=6, head_dim=24, seed=block_size)
    assert_close(run_triton(batch), batch.expected, torch.float32)


@needs_triton
def test_triton_long_sequences():
    """Many blocks per sequence: 19 and 17 blocks of 16, the last ones partly full."""
    batch = make_batch(decode_seqs([300, 257]), 2, 16, heads=8, head_dim=64, seed=7)
    assert_close(run_triton(batch), batch.expected, torch.float32)


@needs_triton
def test_triton_strided_inputs_and_int32_tables():
    """q a slice of a fused QKV projection, K and V interleaved in one pool (K and V of a
    block side by side), and int32 block tables and lengths, as engines keep them."""
    batch = make_batch(decode_seqs([1, 9, 20]), 2, 4, seed=11)
    q = torch.cat([batch.q, torch.zeros_like(batch.q)], dim=1)[:, :HEADS]  # [3, 4 of 8, 16]
    pool = torch.stack([batch.k_cache, batch.v_cache], dim=1)  # [blocks, 2, bs, kv_heads, d]
    k_cache, v_cache = pool[:, 0], pool[:, 1]
    assert not (q.is_contiguous() or k_cache.is_contiguous())
    out = paged_decode_attention_triton(
        q, k_cache, v_cache, batch.block_tables.int(), batch.seq_lens.int()
    )
    assert_close(out, batch.expected, torch.float32)


@needs_triton
@settings(max_examples=8, derandomize=True, deadline=None)
@given(
    seqs=sequences(decode=True),
    block_size=st.sampled_from([1, 2, 4, 8, 16]),
    kv_heads=st.sampled_from(KV_HEADS),
    seed=st.integers(0, 2**16),
)
@example(seqs=[(1, 1)], block_size=16, kv_heads=1, seed=0)  # one key, in one block of 16
def test_triton_random_batches_match_sdpa(seqs, block_size, kv_heads, seed):
    batch = make_batch(seqs, kv_heads, block_size, seed=seed)
    assert_close(run_triton(batch), batch.expected, torch.float32)


@needs_triton
@pytest.mark.skipif(not interpreted(), reason="bf16 is refused only when interpreted; on CUDA "
                    "it is tested in test_triton_decode_matches_sdpa")  # fmt: skip
def test_triton_bf16_is_refused_under_the_interpreter():
    batch = make_batch(decode_seqs([3]), 1, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"bfloat16 is refused under the Triton interpreter"):
        run_triton(batch)


def bad(**changes):
    """Arguments for one sequence of 5 positions in 2 blocks of 4, with `changes` made."""
    args = {
        "q": torch.zeros(1, 4, 16),
        "k_cache": torch.zeros(6, 4, 2, 16),
        "v_cache": torch.zeros(6, 4, 2, 16),
        "block_tables": torch.tensor([[3, 1, -1]]),
        "seq_lens": torch.tensor([5]),
    }
    args.update(changes)
    return {name: t.to(DEVICE) for name, t in args.items()}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (bad(q=torch.zeros(1, 4, 1, 16)), r"q must be \[batch, heads, head_dim\]"),
        (bad(v_cache=torch.zeros(6, 4, 2, 8)), "must have the same shape"),
        (bad(q=torch.zeros(1, 4, 8)), "q has head_dim 8 but the caches 16"),
        (bad(q=torch.zeros(1, 3, 16)), "3 query heads is not a multiple of 2 KV heads"),
        (bad(k_cache=torch.zeros(6, 3, 2, 16), v_cache=torch.zeros(6, 3, 2, 16)),
         "block_size=3 is not a power of two"),
        (bad(seq_lens=torch.tensor([5, 5])), r"block_tables must be \[batch, max_blocks\]"),
        (bad(k_cache=torch.zeros(6, 4, 2, 16).half()), "must share one dtype"),
        (bad(q=torch.zeros(1, 4, 16, dtype=torch.int32)), "float32, float16, bfloat16"),
        (bad(block_tables=torch.tensor([[3.0, 1.0, 0.0]])), "must be int32 or int64"),
        (bad(seq_lens=torch.tensor([0])), r"seq_lens\[0\]=0: .* at least 1"),
        (bad(seq_lens=torch.tensor([13])),
         r"seq_lens\[0\]=13 but its block table holds 3 blocks of 4 = 12 positions"),
        (bad(block_tables=torch.tensor([[3, 6, 0]])),
         r"block_tables\[0, 1\]=6 names no block of the pool \(num_blocks=6\)"),
        (bad(block_tables=torch.tensor([[-1, 1, 0]])), r"block_tables\[0, 0\]=-1 names no"),
    ],
    ids=["q-4d", "v-shape", "head-dim", "gqa", "block-size", "batch", "mixed-dtypes",
         "int-q", "float-table", "empty-seq", "capacity", "block-id", "negative-block-id"],
)  # fmt: skip
def test_triton_bad_arguments_say_what_is_wrong(args, message):
    """Checked before anything runs: the same errors with or without a runnable Triton."""
    with pytest.raises(ValueError, match=message):
        paged_decode_attention_triton(**args)


def test_triton_says_why_it_cannot_run(monkeypatch):
    """Where Triton cannot run (macOS, mps, the CPU uninterpreted) the launcher says why."""
    monkeypatch.setattr(triton_paged_attention, "why_triton_cannot_run", lambda device: "why")
    with pytest.raises(RuntimeError, match=r"^why$"):
        paged_decode_attention_triton(**bad())


def test_imports_without_triton_and_says_what_to_use():
    """On macOS there is no Triton: the module imports, and the kernel points elsewhere."""
    script = (
        "import sys; sys.modules['triton'] = None\n"  # `import triton` now raises ImportError
        "import torch\n"
        "from llmserve_ref.kernels import triton_paged_attention as tpa\n"
        "assert not tpa.TRITON_AVAILABLE\n"
        "x, pool = torch.zeros(1, 1, 16), torch.zeros(1, 4, 1, 16)\n"
        "try:\n"
        "    tpa.paged_decode_attention_triton(x, pool, pool, torch.tensor([[0]]),"
        " torch.tensor([1]))\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Triton is not installed" in result.stdout
