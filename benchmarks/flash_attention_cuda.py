"""TFLOP/s of our Triton FlashAttention forward kernel against SDPA's flash backend, on CUDA.

    python benchmarks/flash_attention_cuda.py                 # the full sweep
    python benchmarks/flash_attention_cuda.py --seq-lens 1024 4096 --dtypes fp16

Each configuration keeps 16k tokens in flight (batch = 16384 / seq_len) and a 2048-wide
model (heads = 2048 / head_dim), as FlashAttention's own benchmarks do, so the short
sequences are not starved of parallel work. Causal runs count only the (query, key) pairs
the mask lets through, so causal and non-causal TFLOP/s compare the useful work. Before
timing, each configuration checks our output against SDPA's within the dtype's tolerance.

Writes <out>/flash_attention_cuda.json, .csv and .svg, and prints the table. Needs an
NVIDIA GPU with Triton; anywhere else it exits with a message saying so.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch

from llmserve_ref.kernels.flash_attention import TOLERANCE, AttentionShape, attention_flops
from llmserve_ref.kernels.triton_attention import flash_attention_forward, why_triton_cannot_run

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOKENS = 16384
MODEL_WIDTH = 2048


def measure(seq_len: int, head_dim: int, causal: bool, dtype: torch.dtype) -> dict:
    """Time both kernels on one configuration; return a row of the table."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention
    from triton.testing import do_bench

    batch, heads = max(1, TOKENS // seq_len), MODEL_WIDTH // head_dim
    q, k, v = (
        torch.randn(batch, heads, seq_len, head_dim, device="cuda", dtype=dtype) for _ in range(3)
    )

    def ours() -> torch.Tensor:
        return flash_attention_forward(q, k, v, causal=causal)[0]

    def sdpa() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return scaled_dot_product_attention(q, k, v, is_causal=causal)

    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(ours(), sdpa(), atol=atol, rtol=rtol)
    flops = attention_flops(
        AttentionShape(batch, heads, heads, seq_len, seq_len, head_dim, causal=causal)
    )
    ms_ours, ms_sdpa = do_bench(ours), do_bench(sdpa)
    return {
        "seq_len": seq_len,
        "head_dim": head_dim,
        "causal": causal,
        "dtype": str(dtype).removeprefix("torch."),
        "batch": batch,
        "heads": heads,
        "ours_ms": ms_ours,
        "sdpa_flash_ms": ms_sdpa,
        "ours_tflops": flops / ms_ours / 1e9,
        "sdpa_flash_tflops": flops / ms_sdpa / 1e9,
    }


def save(rows: list[dict], out: Path, gpu: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "flash_attention_cuda.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=2))
    with (out / "flash_attention_cuda.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    from matplotlib.figure import Figure

    groups = sorted({(r["dtype"], r["head_dim"], r["causal"]) for r in rows})
    fig = Figure(figsize=(4 * len(groups), 3.5), layout="constrained")
    for ax, (dtype, head_dim, causal) in zip(
        fig.subplots(1, len(groups), squeeze=False)[0], groups, strict=True
    ):
        group = [
            r for r in rows if (r["dtype"], r["head_dim"], r["causal"]) == (dtype, head_dim, causal)
        ]
        xs = [r["seq_len"] for r in group]
        ax.plot(xs, [r["ours_tflops"] for r in group], marker="o", label="ours (Triton)")
        ax.plot(xs, [r["sdpa_flash_tflops"] for r in group], marker="s", label="SDPA flash")
        ax.set_xscale("log", base=2)
        ax.set_title(
            f"{dtype}, head_dim {head_dim}, {'causal' if causal else 'non-causal'}", fontsize=9
        )
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.suptitle(f"FlashAttention forward on {gpu}")
    fig.savefig(out / "flash_attention_cuda.svg")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--seq-lens", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192, 16384]
    )
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp16", "bf16"])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()

    if not torch.cuda.is_available():
        print(
            "flash_attention_cuda.py needs an NVIDIA GPU (torch.cuda.is_available() is "
            "False); nothing was measured",
            file=sys.stderr,
        )
        return 1
    reason = why_triton_cannot_run("cuda")
    if reason is not None:
        print(f"flash_attention_cuda.py cannot run the kernel: {reason}", file=sys.stderr)
        return 1

    gpu = torch.cuda.get_device_name()
    rows = []
    print(f"{gpu}; {TOKENS} tokens per configuration, {MODEL_WIDTH}-wide attention")
    print(
        f"{'dtype':>5} {'hd':>4} {'causal':>6} {'seq':>6} {'ours TFLOP/s':>13} "
        f"{'SDPA flash':>11} {'ratio':>6}"
    )
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            for causal in (False, True):
                for seq_len in args.seq_lens:
                    row = measure(seq_len, head_dim, causal, DTYPES[dtype])
                    rows.append(row)
                    print(
                        f"{dtype:>5} {head_dim:>4} {causal!s:>6} {seq_len:>6} "
                        f"{row['ours_tflops']:>13.1f} {row['sdpa_flash_tflops']:>11.1f} "
                        f"{row['ours_tflops'] / row['sdpa_flash_tflops']:>6.2f}"
                    )
    save(rows, args.out, gpu)
    print(f"wrote {args.out}/flash_attention_cuda.json, .csv, .svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
