"""How big is this model's KV cache, and how many requests fit on a GPU?

    python kv_table.py path/to/config.json --context 8192 --batch 1 --gpu H100-SXM

Reads a Hugging Face config.json and prints, for each KV precision, the bytes one
token adds to the cache, one sequence and one batch take, and how many sequences
fit next to the weights. The parameter count is not in config.json: for models in
llmserve_ref's catalog it is known, for others pass --params (from the model card).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from llmserve_ref.planning.hardware import GPUS, gpu
from llmserve_ref.planning.kv_math import (
    DTYPE_BITS,
    format_bytes,
    kv_bytes_per_batch,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_cache_budget,
    max_kv_tokens,
    sequences_that_fit,
    weight_bytes,
)
from llmserve_ref.planning.model_catalog import match_config
from llmserve_ref.planning.model_shape import ModelShape, from_hf_config
from llmserve_ref.planning.published import VLLM


def kv_table(
    cfg: ModelShape,
    context: int,
    batch: int,
    kv_dtypes: list[str],
    budget: int | None,
    tensor_parallel: int = 1,
) -> list[list[str]]:
    """One row per KV precision; the last two columns need a budget (else "-")."""
    rows = [["KV dtype", "per token", "per sequence", "per batch", "cache tokens", "sequences"]]
    tp = {"tensor_parallel": tensor_parallel}
    for dtype in kv_dtypes:
        row = [
            dtype,
            format_bytes(kv_bytes_per_token(cfg, dtype, **tp)),
            format_bytes(kv_bytes_per_sequence(cfg, context, dtype, **tp)),
            format_bytes(kv_bytes_per_batch(cfg, context, batch, dtype, **tp)),
        ]
        if budget is None:
            row += ["-", "-"]
        else:
            row += [
                f"{max_kv_tokens(cfg, budget, dtype, **tp):,}",
                f"{sequences_that_fit(cfg, context, budget, dtype, **tp):,}",
            ]
        rows.append(row)
    return rows


def render(rows: list[list[str]]) -> str:
    """Rows as text columns: the first left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for first, *rest in rows:
        cells = [first.ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def report(args: argparse.Namespace) -> None:
    """Print the model's shape, the KV budget and the table for the parsed arguments."""
    config_json = json.loads(args.config.read_text(encoding="utf-8"))
    known = match_config(config_json)
    cfg = from_hf_config(config_json, name=known.name if known else args.config.stem)
    params = args.params or (known.num_parameters if known else None)
    shape = (
        f"{cfg.kv_lora_rank}-wide latent + {cfg.qk_rope_head_dim}-wide RoPE key"
        if cfg.is_mla
        else f"{cfg.num_kv_heads} KV heads x {cfg.head_dim} dims"
    )
    print(f"{cfg.name}: {cfg.attention}, {cfg.num_layers} layers, {shape}")

    budget = None
    if params is None:
        print("weights: unknown; pass --params N to see how many sequences fit")
    else:
        weights = weight_bytes(params, args.weight_dtype)
        device = gpu(args.gpu)
        budget = kv_cache_budget(
            device.memory_bytes,
            weights,
            tensor_parallel=args.tensor_parallel,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        print(f"weights: {params:,} parameters in {args.weight_dtype} = {format_bytes(weights)}")
        left = format_bytes(budget) if budget > 0 else "nothing: the weights do not fit"
        print(
            f"KV budget: {args.tensor_parallel} x {device.name} "
            f"({format_bytes(device.memory_bytes)}), {args.gpu_memory_utilization:.0%} usable, "
            f"minus weights = {left} per GPU"
        )
    print(f"context {args.context:,} tokens, batch {args.batch}")
    print(
        render(kv_table(cfg, args.context, args.batch, args.kv_dtype, budget, args.tensor_parallel))
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="the model's config.json")
    parser.add_argument("--context", type=int, default=8192, help="tokens per sequence")
    parser.add_argument("--batch", type=int, default=1, help="sequences served together")
    parser.add_argument(
        "--kv-dtype",
        nargs="+",
        default=["bf16", "fp8", "int4"],
        choices=list(DTYPE_BITS),
        help="KV cache precisions to compare",
    )
    parser.add_argument("--gpu", default="H100-SXM", choices=[g.name for g in GPUS])
    parser.add_argument("--tensor-parallel", type=int, default=1, help="GPUs sharing the model")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=VLLM.gpu_memory_utilization,
        help=f"share of GPU memory the engine may use (vLLM's: {VLLM.gpu_memory_utilization})",
    )
    parser.add_argument("--params", type=int, help="parameter count, if not a catalog model")
    parser.add_argument("--weight-dtype", default="bf16", choices=list(DTYPE_BITS))
    args = parser.parse_args(argv)

    try:
        report(args)
    except ValueError as error:  # bad input: say what is wrong, no traceback
        parser.error(str(error))


if __name__ == "__main__":
    main()
