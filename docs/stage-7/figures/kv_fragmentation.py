"""KV memory a running sequence holds, against the memory holding its tokens, by policy."""

from matplotlib.figure import Figure

from llmserve_ref.planning import workload as w
from llmserve_ref.planning.fragmentation import Occupancy, occupancy

BLOCK_SIZES = (8, 16, 32, 128)


def measure() -> Occupancy:
    """400 chat-like requests (median prompt 512 tokens, median answer 128), each asking for
    max_tokens=2048, served 64 at a time by a model with an 8192-token context."""
    requests = w.sample_workload(
        400,
        float("inf"),
        w.LogNormal(512, 1.0, high=4000),
        w.LogNormal(128, 1.0, high=2000),
        seed=0,
    )
    return occupancy(
        requests, max_tokens=2048, max_model_len=8192, block_sizes=BLOCK_SIZES, max_num_seqs=64
    )


def figure() -> Figure:
    o = measure()
    policies = list(o.reserved)
    held = [o.tokens_per_sequence(p) for p in policies]
    live = o.live / o.seq_steps
    fig = Figure(figsize=(8, 3.0), layout="constrained")
    ax = fig.subplots()
    ax.barh(policies, held, color="0.75", label="held per sequence")
    ax.barh(policies, [live] * len(policies), color="C0", label="holding its tokens")
    for y, (policy, tokens) in enumerate(zip(policies, held, strict=True)):
        ax.annotate(
            f"{o.utilization(policy):.0%} used",
            (tokens, y),
            xytext=(4, -3),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_xlabel("KV cache per running sequence (tokens, log scale)")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("reserving up front holds memory no token is in", fontsize=10)
    return fig
