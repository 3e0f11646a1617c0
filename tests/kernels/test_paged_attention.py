"""Paged attention against SDPA: the reference, the batched decode and the batched verify.

Every test draws each sequence's keys and values as contiguous tensors, computes the oracle
(`sdpa_attention`, float64, bottom-right causal) on them, and only then scatters them into
random blocks of a pool through a random block table: the oracle never sees a block table.
Pool slots that no sequence owns, and block table entries past a sequence's blocks, hold
NaN and -1, so a read past a sequence's length shows; `paged_decode_attention` and
`paged_verify_attention` are the exception, as they read every entry of the table and whole
blocks (see `make_batch`).

The Triton kernel's tests, on batches made here by `make_batch`, are in
tests/kernels/test_triton_paged_attention.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_flash_attention import assert_close
from torch import Tensor

from llmserve_ref.device import get_device
from llmserve_ref.kernels.flash_attention import sdpa_attention
from llmserve_ref.kernels.paged_attention import (
    gather_kv,
    paged_attention,
    paged_decode_attention,
    paged_verify_attention,
)

DEVICE = get_device()

HEADS = 4
KV_HEADS = [4, 2, 1]  # MHA, GQA (2 query heads per KV head), MQA
# (seq_len, q_len): a first token alone, decode tokens at lengths that are and are not
# multiples of the block sizes, a whole prompt, and a chunk of a prompt after cached keys.
MIXED = [(1, 1), (7, 1), (9, 9), (16, 1), (30, 5), (33, 1)]
DECODE_LENS = [1, 7, 16, 33]
# (seq_len, q_len) for speculative decoding's check: a newest token and 0 to 4 guesses, the
# newest first in a sequence or after others, a guess on a block boundary.
VERIFY = [(1, 1), (7, 3), (16, 5), (33, 2), (9, 1), (5, 5)]


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

    `whole_blocks` is for `paged_decode_attention` and `paged_verify_attention`, which
    gather every table entry and whole blocks and multiply the masked positions' zero
    weights by their values: there the unused entries name real blocks and the unused
    slots hold large finite garbage (NaN would make 0 * NaN = NaN) instead of -1 and NaN.
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


def batched(path: str, batch: Batch) -> Tensor:
    """The batched decode (one query per sequence) or verify (a few per sequence) of `batch`."""
    args = (batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
    if path == "decode":
        return paged_decode_attention(*args)
    return paged_verify_attention(*args, batch.query_start)


BATCHED = {"decode": decode_seqs(DECODE_LENS), "verify": VERIFY}


@pytest.mark.parametrize("path", BATCHED)
@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_batched_paths_match_sdpa(block_size, kv_heads, path):
    batch = make_batch(BATCHED[path], kv_heads, block_size, seed=block_size, whole_blocks=True)
    out = batched(path, batch)
    assert out.shape == batch.q.shape and out.dtype == batch.q.dtype
    assert_close(out, batch.expected, torch.float32)


@pytest.mark.parametrize("path", BATCHED)
@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    seqs=sequences(decode=False),
    block_size=st.sampled_from([1, 2, 4, 16]),
    kv_heads=st.sampled_from(KV_HEADS),
    seed=st.integers(0, 2**16),
)
def test_batched_paths_random_batches_match_sdpa(path, seqs, block_size, kv_heads, seed):
    if path == "decode":
        seqs = decode_seqs([seq_len for seq_len, _ in seqs])
    batch = make_batch(seqs, kv_heads, block_size, head_dim=8, seed=seed, whole_blocks=True)
    assert_close(batched(path, batch), batch.expected, torch.float32)


def test_every_tensor_is_made_on_the_inputs_device_not_the_default_one():
    """Under a default device of `meta`, a tensor made without `device=` would land there."""
    batch = make_batch(MIXED, 2, 4, seed=5)
    short = {
        path: make_batch(seqs, 2, 4, seed=6, whole_blocks=True) for path, seqs in BATCHED.items()
    }
    with torch.device("meta"):
        out = paged_attention(
            batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
            batch.query_start,
        )  # fmt: skip
        outs = {path: batched(path, b) for path, b in short.items()}
    assert out.device == batch.q.device
    assert_close(out, batch.expected, torch.float32)
    for path, b in short.items():
        assert outs[path].device == batch.q.device
        assert_close(outs[path], b.expected, torch.float32)
