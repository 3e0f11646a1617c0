"""The paged decode kernel in Triton against SDPA, and the checks in front of it.

The kernel's batches come from `make_batch` in tests/kernels/test_paged_attention.py: each
sequence's keys and values drawn contiguous, SDPA's answer (float64) computed on them, and
only then scattered into random blocks of a pool through a random block table, with NaN in
the slots no sequence owns and -1 in the table past each sequence's blocks.

The kernel runs compiled on CUDA and in Triton's interpreter on the CPU, which needs
TRITON_INTERPRET=1 before Python starts (the nox cpu session sets it); without it, and on
mps, its tests skip and say why. The argument checks run everywhere: they come first.
`check_paged_decode_args` reads shapes and dtypes only (it passes on the meta device, which
has no data); `check_paged_decode_contents` reads the lengths and the table entries a
decode uses, and `paged_decode_attention_triton` calls it only when `check` is true.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_flash_attention import assert_close
from test_paged_attention import (
    DECODE_LENS,
    HEADS,
    KV_HEADS,
    Batch,
    decode_seqs,
    make_batch,
    sequences,
)
from torch import Tensor

from llmserve_ref.device import get_device
from llmserve_ref.kernels import triton_paged_attention
from llmserve_ref.kernels.triton_attention import interpreted, why_triton_cannot_run
from llmserve_ref.kernels.triton_paged_attention import (
    check_paged_decode_args,
    check_paged_decode_contents,
    paged_decode_attention_triton,
)

DEVICE = get_device()
CANNOT_RUN = why_triton_cannot_run(DEVICE)
needs_triton = pytest.mark.skipif(CANNOT_RUN is not None, reason=f"Triton kernels: {CANNOT_RUN}")
# float16 and bfloat16 are checked where they are computed for real: compiled on CUDA.
TRITON_DTYPES = [torch.float32] + ([torch.float16, torch.bfloat16] if DEVICE.type == "cuda" else [])


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
@pytest.mark.slow  # 7 s to 11 s in the interpreter on two shared cores
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
        "from llmserve_ref.kernels import triton_attention, triton_paged_attention as tpa\n"
        "assert not triton_attention.TRITON_AVAILABLE\n"
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


# --- the two checks, and `check` ------------------------------------------------------------


@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (4, 1), (6, 2)])
def test_the_shape_check_returns_the_group_and_reads_no_data(heads, kv_heads):
    """On the meta device (shapes and dtypes, no data at all) the shape check passes and
    returns the group size, even for lengths and entries the content check refuses; the
    content check needs the data."""
    meta = {"device": "meta"}
    q, pool = torch.zeros(2, heads, 16, **meta), torch.zeros(6, 4, kv_heads, 16, **meta)
    tables = torch.zeros(2, 3, dtype=torch.long, **meta)
    seq_lens = torch.zeros(2, dtype=torch.int32, **meta)
    assert check_paged_decode_args(q, pool, pool, tables, seq_lens) == heads // kv_heads
    with pytest.raises(NotImplementedError, match="meta"):
        check_paged_decode_contents(tables, seq_lens, num_blocks=6, block_size=4)


def test_the_shape_check_leaves_the_contents_alone():
    """Lengths of 0 and past the table, entries naming no block: not its business."""
    args = bad(seq_lens=torch.tensor([13]), block_tables=torch.tensor([[-1, 60, 7]]))
    assert check_paged_decode_args(**args) == 2
    with pytest.raises(ValueError, match=r"seq_lens\[0\]=13"):
        check_paged_decode_contents(args["block_tables"], args["seq_lens"], 6, 4)


def contents_error(
    tables: list[list[int]], seq_lens: list[int], num_blocks: int, block_size: int
) -> str | None:
    """The oracle, in plain Python: what is wrong with these lengths and entries, if anything."""
    for seq_len, row in zip(seq_lens, tables, strict=True):
        if not 1 <= seq_len <= len(row) * block_size:
            return "seq_lens"
    for row, seq_len in zip(tables, seq_lens, strict=True):
        if any(not 0 <= e < num_blocks for e in row[: math.ceil(seq_len / block_size)]):
            return "block_tables"
    return None


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    num_blocks=st.integers(1, 6),
    block_size=st.sampled_from([1, 2, 4]),
    data=st.data(),
)
def test_the_content_check_refuses_exactly_the_bad_lengths_and_used_entries(
    num_blocks, block_size, data
):
    """Entries past a sequence's blocks are never read, so anything may stand there."""
    batch, width = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    row = st.lists(st.integers(-2, num_blocks + 1), min_size=width, max_size=width)
    tables = data.draw(st.lists(row, min_size=batch, max_size=batch))
    length = st.integers(0, width * block_size + 1)
    seq_lens = data.draw(st.lists(length, min_size=batch, max_size=batch))
    expected = contents_error(tables, seq_lens, num_blocks, block_size)
    call = (torch.tensor(tables), torch.tensor(seq_lens), num_blocks, block_size)
    if expected is None:
        check_paged_decode_contents(*call)
    else:
        with pytest.raises(ValueError, match=rf"^{expected}\["):
            check_paged_decode_contents(*call)


def test_the_content_check_names_the_first_bad_entry_and_what_the_sequence_uses():
    tables = torch.tensor([[0, 1, 9], [2, 6, 3], [4, -1, -1]])
    seq_lens = torch.tensor([8, 9, 2])  # blocks of 4: rows use 2, 3 and 1 entries
    message = (
        r"block_tables\[1, 1\]=6 names no block of the pool \(num_blocks=6\); "
        r"sequence 1 uses its first 3 entries"
    )
    with pytest.raises(ValueError, match=message):
        check_paged_decode_contents(tables, seq_lens, num_blocks=6, block_size=4)
    tables[1, 1] = 5  # the last block of the pool is a block; 9 in row 0 is never read
    check_paged_decode_contents(tables, seq_lens, num_blocks=6, block_size=4)


def test_check_false_skips_the_content_check(monkeypatch):
    """With `check=False` a bad table entry gets past the checks (here to a stand-in for
    the kernel's launch that refuses to run); with `check=True` it is refused first."""
    calls = []
    real = triton_paged_attention.check_paged_decode_contents
    spy = lambda *args: calls.append(args) or real(*args)  # noqa: E731
    monkeypatch.setattr(triton_paged_attention, "check_paged_decode_contents", spy)
    monkeypatch.setattr(triton_paged_attention, "why_triton_cannot_run", lambda device: "launch")
    args = bad(block_tables=torch.tensor([[3, 6, -1]]))  # entry 1 of 2 used names no block
    with pytest.raises(ValueError, match=r"block_tables\[0, 1\]=6 names no block"):
        paged_decode_attention_triton(**args)  # check=True is the default
    with pytest.raises(ValueError, match=r"block_tables\[0, 1\]=6 names no block"):
        paged_decode_attention_triton(**args, check=True)
    assert [c[2:] for c in calls] == [(6, 4), (6, 4)]  # num_blocks, block_size of the pool
    with pytest.raises(RuntimeError, match=r"^launch$"):
        paged_decode_attention_triton(**args, check=False)
    assert len(calls) == 2  # not called again
    with pytest.raises(ValueError, match="must be int32 or int64"):  # the shape check stays
        paged_decode_attention_triton(**{**args, "seq_lens": torch.tensor([5.0])}, check=False)


class _Launch:
    """Wraps a Triton kernel: records each launch's grid, then launches it."""

    def __init__(self, kernel, launched: list) -> None:
        self.kernel, self.launched = kernel, launched

    def __getitem__(self, grid):
        self.launched.append(grid)
        return self.kernel[grid]


@needs_triton
def test_a_bad_table_entry_in_a_real_batch_is_refused(monkeypatch):
    """A valid batch, then one entry a sequence uses pointed past the pool: refused before
    the kernel is launched. The -1 entries past each sequence's blocks stay allowed."""
    batch = make_batch(decode_seqs([3, 9, 5]), 2, 4, seed=5)
    tables = batch.block_tables.clone()
    tables[1, 2] = batch.k_cache.shape[0]  # sequence 1 (9 positions) uses 3 blocks
    launched = []
    kernel = _Launch(triton_paged_attention._paged_decode_kernel, launched)
    monkeypatch.setattr(triton_paged_attention, "_paged_decode_kernel", kernel)
    args = (batch.q, batch.k_cache, batch.v_cache, tables, batch.seq_lens)
    with pytest.raises(ValueError, match=r"block_tables\[1, 2\]=\d+ names no block"):
        paged_decode_attention_triton(*args, check=True)
    assert launched == []
    assert_close(run_triton(batch), batch.expected, torch.float32)  # its own table runs
    assert len(launched) == 1


@needs_triton
def test_check_false_computes_the_same_without_the_check():
    batch = make_batch(decode_seqs([1, 6, 13]), 1, 4, seed=9)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
    checked = paged_decode_attention_triton(*args)
    unchecked = paged_decode_attention_triton(*args, check=False)
    assert torch.equal(checked, unchecked)
    assert_close(unchecked, batch.expected, torch.float32)


@needs_triton
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
def test_without_the_check_an_empty_sequence_gives_nan_not_an_error():
    """What the content check is for: a length of 0 reads no key, and the kernel's softmax
    divides 0 by 0. The engine's block manager never asks for that; a caller might."""
    args = bad(seq_lens=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"seq_lens\[0\]=0"):
        paged_decode_attention_triton(**args)
    out = paged_decode_attention_triton(**args, check=False)
    assert out.shape == (1, HEADS, 16) and out.isnan().all()
