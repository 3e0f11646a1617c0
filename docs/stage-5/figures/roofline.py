"""Rooflines of catalog GPUs, with Llama-3.1-8B's decode and prefill steps on them."""

from matplotlib.figure import Figure

from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import StepCost, datasheet_roof, prefill_attention_pairs

FIGURE_GPUS = ("H100-SXM", "A100-SXM-80GB", "MI300X", "L4", "M4-Max")


def figure() -> Figure:
    """bf16 datasheet roofs, log-log; H100 points: decode at context 1000, a 2048-token prefill."""
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    xs = [2**k / 4 for k in range(0, 17)]  # 0.25 ... 16384 FLOPs/byte
    for name in FIGURE_GPUS:
        roof = datasheet_roof(gpu(name), "bf16")
        knee = sorted([*xs, roof.ridge_point])
        ax.plot(knee, [roof.attainable_flops(x) / 1e12 for x in knee], label=f"{name} bf16")
        ax.plot([roof.ridge_point], [roof.peak_flops / 1e12], "k.", markersize=5)
    cost = StepCost(model("Llama-3.1-8B"), gpu("H100-SXM"))
    h100 = cost.roof
    for batch in (1, 8, 64, 256):
        x = cost.arithmetic_intensity(batch, batch * 1000)
        ax.plot([x], [h100.attainable_flops(x) / 1e12], "o", color="tab:red", markersize=6)
        ax.annotate(
            f"decode, batch {batch}",
            (x, h100.attainable_flops(x) / 1e12),
            textcoords="offset points",
            xytext=(6, -10),
            fontsize=8,
            color="tab:red",
        )
    x = cost.arithmetic_intensity(2048, 0, prefill_attention_pairs(2048))
    ax.plot([x], [h100.attainable_flops(x) / 1e12], "s", color="tab:purple", markersize=6)
    ax.annotate(
        "prefill, 2048 tokens",
        (x, h100.attainable_flops(x) / 1e12),
        textcoords="offset points",
        xytext=(-40, 8),
        fontsize=8,
        color="tab:purple",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("attainable TFLOP/s (dense bf16 datasheet peak)")
    ax.set_title("Llama-3.1-8B on an H100: decode sits on the slope, prefill on the roof")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig
