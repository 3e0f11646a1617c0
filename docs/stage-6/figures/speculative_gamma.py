"""Expected tokens per target forward and expected speedup against gamma (formulas, no timing)."""

from matplotlib.figure import Figure

from llmserve_ref.engine.speculative import expected_speedup, expected_tokens_per_forward
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import StepCost, prefill_attention_pairs

GAMMAS = list(range(1, 11))
ALPHAS = (0.5, 0.7, 0.8, 0.9)
COST_RATIOS = (0.02, 0.1, 0.3, 0.6)
ALPHA = 0.8


def verify_cost(gamma: int, batch: int, context: int) -> float:
    """Roofline time of Llama-3.1-8B on an H100 verifying gamma + 1 tokens per sequence / 1."""
    cost = StepCost(model("Llama-3.1-8B"), gpu("H100-SXM"))
    width = gamma + 1
    pairs = batch * prefill_attention_pairs(width, cached=context)
    return cost.step_time(batch * width, batch * context, pairs) / cost.step_time(
        batch, batch * context
    )


def figure() -> Figure:
    """Left: (1 − α^(γ+1)) / (1 − α). Right: expected speedup at α = 0.8 for several c and v."""
    fig = Figure(figsize=(9.5, 4.0), layout="constrained")
    left, right = fig.subplots(1, 2)
    for alpha in ALPHAS:
        left.plot(
            GAMMAS,
            [expected_tokens_per_forward(alpha, g) for g in GAMMAS],
            "o-",
            markersize=3,
            label=f"α = {alpha}",
        )
    left.plot(GAMMAS, [g + 1 for g in GAMMAS], "k:", label="α = 1 (γ + 1)")
    left.set_xlabel("γ (draft tokens per round)")
    left.set_ylabel("expected tokens per target forward")
    left.set_title("Tokens per target forward")
    left.legend(fontsize=8, loc="upper left")
    for c in COST_RATIOS:
        right.plot(
            GAMMAS,
            [expected_speedup(ALPHA, g, c) for g in GAMMAS],
            "o-",
            markersize=3,
            label=f"c = {c}, memory-bound target (v = 1)",
        )
    right.plot(
        GAMMAS,
        [expected_speedup(ALPHA, g, 0.02, verify_cost(g, 256, 200)) for g in GAMMAS],
        "s--",
        markersize=3,
        color="black",
        label="c = 0.02, v from the roofline: Llama-3.1-8B,\nH100, batch 256, context 200",
    )
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set_xlabel("γ (draft tokens per round)")
    right.set_ylabel("expected speedup over target-only decoding")
    right.set_title(f"Expected speedup at α = {ALPHA}")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    return fig
