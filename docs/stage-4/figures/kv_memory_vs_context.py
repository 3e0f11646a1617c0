"""KV cache of one sequence against its length, for catalog models, beside GPU memory sizes."""

from matplotlib.figure import Figure

from llmserve_ref.planning.hardware import GIB, gpu
from llmserve_ref.planning.kv_math import kv_bytes_per_sequence
from llmserve_ref.planning.model_catalog import model

FIGURE_MODELS = (
    "Llama-2-7B",
    "Qwen2.5-7B",
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Llama-3.1-405B",
    "DeepSeek-V3",
)
FIGURE_GPUS = ("L4", "H100-SXM", "H200-SXM")
MARKERS = "osD^vP"
Y_TICKS = {
    2**-4: "64 MiB",
    2**-2: "256 MiB",
    1: "1 GiB",
    4: "4 GiB",
    16: "16 GiB",
    64: "64 GiB",
    256: "256 GiB",
}


def figure() -> Figure:
    """bf16 KV cache, batch 1, each model up to its own maximum context (at most 128k tokens)."""
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    contexts = [2**k for k in range(10, 18)]  # 1k ... 128k tokens
    for name, marker in zip(FIGURE_MODELS, MARKERS, strict=True):
        cfg = model(name).config
        xs = [c for c in contexts if c <= cfg.max_position_embeddings]
        ys = [kv_bytes_per_sequence(cfg, c, "bf16") / GIB for c in xs]
        # Llama-2-7B lies almost on Llama-3.1-405B: a wide pale line keeps both visible.
        wide = {"linewidth": 5, "alpha": 0.4} if cfg.attention == "MHA" else {}
        ax.plot(xs, ys, marker=marker, markersize=4, label=f"{name} ({cfg.attention})", **wide)
    for name in FIGURE_GPUS:
        memory = gpu(name).memory_gib
        ax.axhline(memory, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(
            f"{name}: {memory:g} GiB, whole GPU",
            (contexts[0], memory),
            textcoords="offset points",
            xytext=(2, 3),
            fontsize=8,
            color="dimgrey",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(contexts, [f"{c // 1024}k" for c in contexts])
    ax.set_yticks(list(Y_TICKS), list(Y_TICKS.values()))
    ax.set_ylim(2**-5, 2**9)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("KV cache of one sequence (bf16)")
    ax.set_title("One sequence's KV cache grows linearly with its context")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig
