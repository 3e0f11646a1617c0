"""Time per new token against context, with and without the KV cache (measured, one thread)."""

import torch
from matplotlib.figure import Figure

from llmserve_ref.device import get_device
from llmserve_ref.model.weights import load_target
from llmserve_ref.planning.measure import interleaved, torch_threads
from llmserve_ref.planning.phases import decode_step, recompute_step

CONTEXTS = (16, 32, 64, 128, 192, 255)


def measure(contexts=CONTEXTS, rounds: int = 5) -> dict[str, dict[int, float]]:
    """Median seconds per new token of the target model, by context, cached and recomputed."""
    device = get_device()
    model, _ = load_target(device)
    steps = {}
    for context in contexts:
        steps[f"cache {context}"] = decode_step(model, 1, context)
        steps[f"recompute {context}"] = recompute_step(model, context)
    threads = 1 if device.type == "cpu" else torch.get_num_threads()
    with torch_threads(threads):
        seconds = interleaved(steps, rounds, device)
    return {way: {c: seconds[f"{way} {c}"] for c in contexts} for way in ("cache", "recompute")}


def plot(seconds: dict[str, dict[int, float]]) -> Figure:
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    labels = {"recompute": "no cache: recompute the whole prefix", "cache": "KV cache: one token"}
    for way, marker in (("recompute", "s"), ("cache", "o")):
        contexts = list(seconds[way])
        ax.plot(
            contexts, [seconds[way][c] * 1e3 for c in contexts], marker=marker, label=labels[way]
        )
    ax.set_xlabel("tokens already in the sequence (context)")
    ax.set_ylabel("ms per new token (median)")
    ax.set_yscale("log")
    ax.set_title(f"Target model, batch 1, measured on {get_device().type} when this page was built")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def figure() -> Figure:
    return plot(measure())
