"""Bytes one attention layer of Llama-3.1-8B moves to and from HBM, against context length."""

from matplotlib.figure import Figure

from llmserve_ref.kernels.flash_attention import AttentionShape, naive_hbm_bytes, tiled_hbm_bytes
from llmserve_ref.planning.hardware import GIB
from llmserve_ref.planning.model_catalog import model


def figure() -> Figure:
    """Causal prefill of one sequence, bf16; every count from `kernels.flash_attention`."""
    cfg = model("Llama-3.1-8B").config
    contexts = [2**k for k in range(10, 18)]  # 1k ... 128k tokens
    shapes = [
        AttentionShape(1, cfg.num_attention_heads, cfg.num_kv_heads, n, n, cfg.head_dim)
        for n in contexts
    ]
    curves = {
        "standard attention (N x N scores through HBM)": [naive_hbm_bytes(s) for s in shapes],
        "FlashAttention, 128-query tiles, no L2 reuse": [tiled_hbm_bytes(s, 128) for s in shapes],
        "FlashAttention, every input read once": [tiled_hbm_bytes(s, s.q_len) for s in shapes],
    }
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for (label, ys), marker in zip(curves.items(), "osd", strict=True):
        ax.plot(contexts, [y / GIB for y in ys], marker=marker, markersize=4, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(contexts, [f"{c // 1024}k" for c in contexts])
    ax.set_xlabel("context length N (tokens), causal prefill")
    ax.set_ylabel("HBM traffic of one layer (GiB, bf16)")
    ax.set_title("Llama-3.1-8B, one attention layer: quadratic terms against a linear one")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig
