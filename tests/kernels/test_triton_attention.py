"""The Triton kernels against SDPA: compiled on CUDA, in Triton's interpreter on the CPU.

On the CPU these need `TRITON_INTERPRET=1` in the environment before Python starts (the
nox cpu session sets it); without it, and on mps, the kernel tests skip and say why.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_flash_attention import SHAPES, assert_close, default_dtype, make_qkv

from llmserve_ref.device import get_device
from llmserve_ref.kernels import triton_attention
from llmserve_ref.kernels.flash_attention import sdpa_attention
from llmserve_ref.kernels.triton_attention import flash_attention_forward, flash_decode, plan_splits

DEVICE = get_device()
CANNOT_RUN = triton_attention.why_triton_cannot_run(DEVICE)
needs_triton = pytest.mark.skipif(CANNOT_RUN is not None, reason=f"Triton kernels: {CANNOT_RUN}")
# bfloat16 is checked where it is computed for real: compiled on CUDA.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.type == "cuda" else [])


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_sdpa(shape, dtype):
    q, k, v = make_qkv(shape, dtype)
    out, lse = flash_attention_forward(q, k, v, causal=shape[-1])
    expected, expected_lse = sdpa_attention(q, k, v, causal=shape[-1])
    assert out.dtype == dtype and out.shape == q.shape and lse.dtype == torch.float32
    assert_close(out, expected, dtype)
    assert_close(lse, expected_lse, torch.float32)


@needs_triton
@pytest.mark.parametrize("causal", [True, False])
def test_forward_small_tiles_strided_inputs(causal):
    """Many 16-row tiles, a causal chunk of 45 queries after 100 cached keys, and K/V in the
    (batch, seq, heads, dim) layout models produce, seen through a transpose."""
    q, k, v = make_qkv((2, 8, 2, 45, 145, 32, causal), torch.float32, seed=5)
    k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    assert not k.is_contiguous()
    out, lse = flash_attention_forward(q, k, v, causal=causal, block_m=16, block_n=16)
    expected, expected_lse = sdpa_attention(q, k, v, causal=causal)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


@needs_triton
@pytest.mark.parametrize("kv_len", [1, 65, 300])
@pytest.mark.parametrize("num_splits", [1, 3, 8])
def test_decode_matches_sdpa(kv_len, num_splits):
    q, k, v = make_qkv((2, 8, 2, 1, kv_len, 64, False), torch.float32, seed=kv_len)
    out, lse = flash_decode(q, k, v, num_splits=num_splits)
    expected, expected_lse = sdpa_attention(q, k, v)
    assert out.shape == q.shape and lse.shape == (2, 8, 1)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


@needs_triton
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_dtypes_and_default_splits(dtype):
    """Head dim 128, GQA 4, a cache long enough for the default plan to split it."""
    q, k, v = make_qkv((1, 4, 1, 1, 1100, 128, False), dtype, seed=6)
    out, lse = flash_decode(q, k, v)
    expected, expected_lse = sdpa_attention(q, k, v)
    assert_close(out, expected, dtype)
    assert_close(lse, expected_lse, torch.float32)
    # The same query through the forward kernel (one query tile, no split) agrees too.
    forward, _ = flash_attention_forward(q, k, v)
    assert_close(out, forward.cpu().double(), dtype)


@needs_triton
def test_an_explicit_scale_is_used_by_both_kernels_and_forward_is_not_causal_by_default():
    q, k, v = make_qkv((1, 4, 2, 5, 40, 16, False), torch.float32, seed=8)
    expected, expected_lse = sdpa_attention(q, k, v, scale=0.5)
    out, lse = flash_attention_forward(q, k, v, scale=0.5)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)
    q = q[..., -1:, :]
    expected, expected_lse = sdpa_attention(q, k, v, scale=0.5)
    out, lse = flash_decode(q, k, v, num_splits=2, scale=0.5)
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


@needs_triton
def test_decode_reads_a_strided_query_and_returns_its_dtype():
    """The last query of a (batch, seq, heads, dim) layout, seen through a transpose."""
    q, k, v = make_qkv((2, 4, 2, 3, 40, 16, False), torch.float16, seed=10)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)[..., -1:, :]
    assert q.stride(1) != q.stride(2)
    out, lse = flash_decode(q, k, v, num_splits=2)
    expected, expected_lse = sdpa_attention(q, k, v)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32
    assert_close(out, expected, torch.float16)
    assert_close(lse, expected_lse, torch.float32)


@needs_triton
def test_every_tensor_is_made_on_the_inputs_device_not_the_default_one():
    """Under a default device of `meta`, a tensor made without `device=` would land there."""
    q, k, v = make_qkv((1, 2, 1, 1, 40, 16, False), torch.float32, seed=9)
    expected = flash_attention_forward(q, k, v), flash_decode(q, k, v, num_splits=2)
    with torch.device("meta"):
        results = flash_attention_forward(q, k, v), flash_decode(q, k, v, num_splits=2)
    for (out, lse), (want, want_lse) in zip(results, expected, strict=True):
        assert out.device == lse.device == q.device
        assert torch.equal(out, want) and torch.equal(lse, want_lse)


@needs_triton
def test_lse_is_float32_whatever_the_default_dtype():
    q, k, v = make_qkv((1, 2, 1, 1, 40, 16, False), torch.float32, seed=11)
    with default_dtype(torch.float64):
        results = flash_attention_forward(q, k, v), flash_decode(q, k, v, num_splits=2)
    for out, lse in results:
        assert out.dtype == q.dtype and lse.dtype == torch.float32


@needs_triton
def test_decode_partials_are_float32_whatever_the_default_dtype():
    """Under a float16 default dtype, partials made without `dtype=` would round each
    partition's output and LSE to 11 bits, and the merged result would miss float32's
    tolerance."""
    q, k, v = make_qkv((1, 2, 1, 1, 40, 16, False), torch.float32, seed=11)
    with default_dtype(torch.float16):
        out, lse = flash_decode(q, k, v, num_splits=2, block_n=16)
    expected, expected_lse = sdpa_attention(q, k, v)
    assert out.dtype == lse.dtype == torch.float32
    assert_close(out, expected, torch.float32)
    assert_close(lse, expected_lse, torch.float32)


class LaunchSpy:
    """Stands for a jitted kernel: `kernel[grid](*args, **kwargs)` records the keywords."""

    def __init__(self) -> None:
        self.launches: list[dict] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(kwargs)


@pytest.mark.skipif(not triton_attention.TRITON_AVAILABLE, reason="Triton is not installed")
@pytest.mark.parametrize(
    ("dtype", "head_dim", "precision", "num_warps"),
    [
        (torch.float32, 64, "ieee", 4),
        (torch.float32, 128, "ieee", 8),
        (torch.float16, 16, "tf32", 4),
        (torch.float16, 128, "tf32", 8),
    ],
)
def test_forward_launch_takes_exact_float32_dots_and_eight_warps_past_head_dim_64(
    monkeypatch, dtype, head_dim, precision, num_warps
):
    """float32 dots in IEEE precision (tf32 would round the inputs to 10 bits), 4 warps up
    to head_dim 64 and 8 above, 2 pipeline stages (the kernel does not run here)."""
    spy = LaunchSpy()
    monkeypatch.setattr(triton_attention, "_check_runnable", lambda *tensors: None)
    monkeypatch.setattr(triton_attention, "_flash_forward_kernel", spy)
    q = torch.zeros(1, 1, 4, head_dim, dtype=dtype)
    flash_attention_forward(q, q, q)
    [launch] = spy.launches
    assert (launch["PRECISION"], launch["num_warps"], launch["num_stages"]) == (
        precision,
        num_warps,
        2,
    )


def test_tensors_on_two_devices_or_on_one_triton_cannot_use_are_refused():
    """`meta` stands for a device other than the inputs', and for one Triton cannot run on."""
    q = torch.zeros(1, 1, 1, 16)
    on_meta = torch.zeros(1, 1, 4, 16, device="meta")
    with pytest.raises(ValueError, match=r"all tensors must be on one device; got cpu, meta, meta"):
        flash_attention_forward(q, on_meta, on_meta)
    with pytest.raises(RuntimeError, match=r"the Triton kernels run on cuda .*, not on meta"):
        flash_decode(q.to("meta"), on_meta, on_meta)


def test_without_triton_nothing_is_interpreted(monkeypatch):
    monkeypatch.setattr(triton_attention, "TRITON_AVAILABLE", False)
    assert not triton_attention.interpreted()


REFERENCE = "use llmserve_ref.kernels.flash_attention, the PyTorch reference"


def test_why_triton_cannot_run_says_what_to_do_instead(monkeypatch):
    """Each reason in full: a reader acts on these sentences (the fresh-process tests below
    show them where they arise for real)."""
    why = triton_attention.why_triton_cannot_run
    assert why("mps") == f"Triton does not run on Apple GPUs (mps); {REFERENCE}"
    monkeypatch.setattr(triton_attention, "TRITON_AVAILABLE", True)
    monkeypatch.setattr(triton_attention, "interpreted", lambda: False)
    assert why("meta") == "the Triton kernels run on cuda (or on the cpu, interpreted), not on meta"
    assert why("cuda") is None
    assert why("cpu") == (
        "on the CPU the Triton kernels run only in Triton's interpreter: set "
        "TRITON_INTERPRET=1 before starting Python (the nox cpu session does)"
    )
    monkeypatch.setattr(triton_attention, "interpreted", lambda: True)
    assert why("cpu") is None
    monkeypatch.setattr(triton_attention, "TRITON_AVAILABLE", False)
    assert why("cuda") == (
        f"Triton is not installed (it has Linux wheels only: pip install triton); {REFERENCE}"
    )


@needs_triton
def test_refusals_name_what_was_passed():
    q = torch.zeros(1, 1, 1, 48)
    with pytest.raises(ValueError) as refused:
        flash_attention_forward(q, q.half(), q)
    assert str(refused.value) == (
        "q, k, v must share one dtype among float32, float16, bfloat16; got "
        "torch.float32, torch.float16, torch.float32"
    )
    with pytest.raises(ValueError) as refused:
        flash_attention_forward(q, q, q)
    assert str(refused.value) == (
        "head_dim=48 is not supported; the kernels take 16, 32, 64, 128 "
        "(pad the head dim up to one of them)"
    )


@needs_triton
def test_query_and_keys_of_different_head_dims_are_refused_as_a_mismatch():
    """q's head_dim (16, supported) is the one checked against the kernels' list, so k's 8
    fails the shape check, which names the mismatch rather than an unsupported size."""
    q, kv = torch.zeros(1, 1, 1, 16, device=DEVICE), torch.zeros(1, 1, 4, 8, device=DEVICE)
    for kernel in (flash_attention_forward, flash_decode):
        with pytest.raises(ValueError, match=r"must agree on batch \(dim 0\) and head_dim"):
            kernel(q, kv, kv)


@needs_triton
def test_decode_checks_its_query_count_not_a_causal_alignment():
    """Decoding is not causal: 2 queries against 1 key are refused for being more than one
    query, not for outnumbering the keys."""
    q, kv = torch.zeros(1, 1, 2, 16, device=DEVICE), torch.zeros(1, 1, 1, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"^flash_decode takes one query per sequence"):
        flash_decode(q, kv, kv)


class Planned(Exception):
    """Raised by the spy below once it has seen the plan: the kernels need not run."""


@pytest.mark.parametrize(("kv_len", "splits"), [(512, 1), (513, 2), (16 * 512, 16), (17 * 512, 16)])
def test_decode_splits_one_partition_per_512_keys_at_most_16_by_default(
    monkeypatch, kv_len, splits
):
    asked = []

    def spy(kv_len, num_splits, block_n):
        asked.append(num_splits)
        raise Planned

    monkeypatch.setattr(triton_attention, "_check_runnable", lambda *tensors: None)
    monkeypatch.setattr(triton_attention, "plan_splits", spy)
    q, k = torch.zeros(1, 1, 1, 16), torch.zeros(1, 1, kv_len, 16)
    with pytest.raises(Planned):
        flash_decode(q, k, k)
    assert asked == [splits]


@needs_triton
@pytest.mark.skipif(
    not triton_attention.interpreted(),
    reason="bf16 is refused only when "
    "interpreted; on CUDA it is tested in test_forward_matches_sdpa",
)
def test_bf16_is_refused_under_the_interpreter():
    q, k, v = make_qkv((1, 1, 1, 4, 4, 32, False), torch.bfloat16)
    for kernel in (flash_attention_forward, flash_decode):
        with pytest.raises(ValueError) as refused:
            kernel(q[..., :1, :], k, v)
        assert str(refused.value) == (
            "bfloat16 is refused under the Triton interpreter (TRITON_INTERPRET=1): numpy has "
            "no bfloat16, so the interpreter would return garbage without an error. Pass "
            "float16 or float32 on the CPU, or run bfloat16 on a CUDA GPU"
        )


@needs_triton
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda q, k: flash_attention_forward(q[..., :48], k[..., :48], k[..., :48]),
            r"head_dim=48 is not supported; the kernels take .* \(pad the head dim",
        ),
        (lambda q, k: flash_attention_forward(q, k.half(), k.half()), "must share one dtype"),
        (
            lambda q, k: flash_attention_forward(q, k[..., :2, :], k[..., :2, :], causal=True),
            "pass at least as many keys as queries",
        ),
        (
            lambda q, k: flash_attention_forward(q, k, k, block_m=24),
            "block_m=24 must be a power of two >= 16",
        ),
        (
            lambda q, k: flash_decode(q, k, k),
            r"one query per sequence \(q_len=1\), got q_len=3; use "
            r"flash_attention_forward\(causal=True\) for a chunk of several new tokens",
        ),
        (lambda q, k: flash_attention_forward(q.half(), k, k), "must share one dtype"),
        (lambda q, k: flash_attention_forward(q, k, k.half()), "must share one dtype"),
        (lambda q, k: flash_attention_forward(q, k.half(), k), "must share one dtype"),
        (lambda q, k: flash_decode(q[..., :1, :].half(), k, k), "must share one dtype"),
        (lambda q, k: flash_decode(q[..., :1, :], k.half(), k), "must share one dtype"),
        (lambda q, k: flash_decode(q[..., :1, :], k, k.half()), "must share one dtype"),
        (
            lambda q, k: flash_attention_forward(q, k, k, block_n=24),
            "block_n=24 must be a power of two >= 16",
        ),
        (
            lambda q, k: flash_decode(q[..., :1, :], k, k, block_n=24),
            "block_n=24 must be a power of two >= 16",
        ),
        (
            lambda q, k: flash_decode(q[..., :1, :], k, k, num_splits=0),
            "split the cache into at least 1 partition",
        ),
        (
            lambda q, k: flash_attention_forward(
                q.to(torch.int32), k.to(torch.int32), k.to(torch.int32)
            ),
            "float32, float16, bfloat16",
        ),
    ],
    ids=[
        "hd48",
        "mixed-dtypes",
        "causal-short-kv",
        "block",
        "block_n",
        "decode-q_len",
        "q-dtype",
        "v-dtype",
        "k-dtype",
        "decode-q-dtype",
        "decode-k-dtype",
        "decode-v-dtype",
        "decode-block",
        "splits",
        "int",
    ],
)
def test_bad_arguments_say_what_to_do(call, message):
    q = torch.randn(1, 4, 3, 64, device=DEVICE)
    k = torch.randn(1, 2, 8, 64, device=DEVICE)
    with pytest.raises(ValueError, match=message):
        call(q, k)


def error_in_fresh_process(prelude: str, shape: str, check: str = "") -> str:
    """The error the forward kernel raises in a fresh Python without TRITON_INTERPRET."""
    script = (
        f"{prelude}\n"
        "import torch\n"
        "from llmserve_ref.kernels import triton_attention as ta\n"
        f"{check}\n"
        f"x = torch.zeros({shape})\n"
        "try:\n"
        "    ta.flash_attention_forward(x, x, x)\n"
        "except RuntimeError as error:\n"
        "    print(error)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_imports_without_triton_and_says_what_to_use():
    """On macOS there is no Triton: the module imports, and the kernels point elsewhere."""
    # `import triton` raises ImportError once sys.modules maps it to None.
    stdout = error_in_fresh_process(
        "import sys; sys.modules['triton'] = None",
        "1, 1, 1, 32",
        check="assert not ta.TRITON_AVAILABLE",
    )
    assert "Triton is not installed" in stdout
    assert "llmserve_ref.kernels.flash_attention, the PyTorch reference" in stdout


def test_cpu_without_interpreter_says_to_set_it():
    """Without TRITON_INTERPRET=1 the CPU path explains itself (checked in a fresh process,
    since the suite itself runs interpreted)."""
    if not triton_attention.TRITON_AVAILABLE:
        pytest.skip("Triton is not installed here (it has Linux wheels only)")
    assert "set TRITON_INTERPRET=1" in error_in_fresh_process("", "1, 1, 4, 32")


@given(
    kv_len=st.integers(1, 100_000),
    asked=st.integers(1, 64),
    block_n=st.sampled_from([16, 32, 64, 128]),
)
def test_split_plan_covers_the_cache_without_empty_partitions(kv_len, asked, block_n):
    split_len, splits = plan_splits(kv_len, asked, block_n)
    assert split_len % block_n == 0
    assert 1 <= splits <= asked
    assert (splits - 1) * split_len < kv_len <= splits * split_len
