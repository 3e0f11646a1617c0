"""Decode attention time against K/V heads: shared reads or per-query-head copies (measured)."""

import torch
from matplotlib.figure import Figure

from llmserve_ref.device import get_device
from llmserve_ref.model.gqa import repeated_kv_attention, shared_kv_attention
from llmserve_ref.planning.measure import interleaved, torch_threads

# The target model's attention shape, at a batch and context where the cache dominates.
BATCH, CONTEXT, LAYERS, HEADS, HEAD_DIM = 16, 1024, 4, 8, 32
KV_HEADS = (8, 4, 2, 1)
ATTENTION = {"repeated": repeated_kv_attention, "shared": shared_kv_attention}


def attention_step(attend, kv_heads, generator, device):
    """One decode step's attention over all layers, with random queries and cache contents."""
    q = torch.randn(BATCH, HEADS, 1, HEAD_DIM, generator=generator).to(device)
    caches = [
        torch.randn(2, BATCH, kv_heads, CONTEXT, HEAD_DIM, generator=generator).to(device)
        for _ in range(LAYERS)
    ]
    return lambda: [attend(q, k, v) for k, v in caches]


def measure(rounds: int = 9) -> dict[str, dict[int, float]]:
    """Median seconds of each attention by K/V head count, each attention's counts side by side.

    The two attentions are timed in separate runs, so that the copies of one do not
    disturb the memory traffic of the other.
    """
    device = get_device()
    g = torch.Generator().manual_seed(0)
    seconds = {}
    with torch_threads(1 if device.type == "cpu" else torch.get_num_threads()):
        for name, attend in ATTENTION.items():
            steps = {h: attention_step(attend, h, g, device) for h in KV_HEADS}
            seconds[name] = interleaved(steps, rounds, device)
    return seconds


def cache_bytes(kv_heads: int) -> int:
    """Bytes of the fp32 cache the step reads: K and V, every layer, every sequence."""
    return LAYERS * 2 * BATCH * kv_heads * CONTEXT * HEAD_DIM * 4


def plot(seconds: dict[str, dict[int, float]]) -> Figure:
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    x = range(len(KV_HEADS))
    labels = [str(h) for h in KV_HEADS]
    left.bar(x, [cache_bytes(h) / 2**20 for h in KV_HEADS], color="tab:gray")
    left.set_ylabel("MiB")
    left.set_title("KV cache read per decode step")
    width = 0.4
    for i, (name, label) in enumerate(
        (("repeated", "copy per query head (repeat_kv)"), ("shared", "shared read"))
    ):
        right.bar(
            [p + (i - 0.5) * width for p in x],
            [seconds[name][h] * 1e3 for h in KV_HEADS],
            width,
            label=label,
        )
    right.set_ylabel("ms (median)")
    right.set_title("attention time of that step")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(list(x), labels)
        ax.set_xlabel("K/V heads (8 query heads)")
    fig.suptitle(
        f"Batch {BATCH}, {CONTEXT} cached tokens, {LAYERS} layers; "
        f"measured on {get_device().type} when this page was built"
    )
    return fig


def figure() -> Figure:
    return plot(measure())
