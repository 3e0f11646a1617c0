"""Prefill throughput against prompt length, decode throughput against batch (measured)."""

import torch
from matplotlib.figure import Figure

from llmserve_ref.device import get_device
from llmserve_ref.model.weights import load_target
from llmserve_ref.planning.measure import interleaved, torch_threads
from llmserve_ref.planning.phases import decode_step, prefill_step

PROMPT_LENS = (1, 4, 16, 64, 256)
BATCHES = (1, 4, 16, 64)
CONTEXT = 128  # tokens each decoding sequence already holds


def measure(rounds: int = 5) -> dict[str, dict[int, float]]:
    """Median seconds of one prefill (batch 1) per prompt length and one decode step per batch."""
    device = get_device()
    model, _ = load_target(device)
    steps = {f"prefill {n}": prefill_step(model, 1, n) for n in PROMPT_LENS}
    steps |= {f"decode {b}": decode_step(model, b, CONTEXT) for b in BATCHES}
    with torch_threads(1 if device.type == "cpu" else torch.get_num_threads()):
        seconds = interleaved(steps, rounds, device)
    return {
        "prefill": {n: seconds[f"prefill {n}"] for n in PROMPT_LENS},
        "decode": {b: seconds[f"decode {b}"] for b in BATCHES},
    }


def plot(seconds: dict[str, dict[int, float]]) -> Figure:
    fig = Figure(figsize=(8, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True)
    lens = list(seconds["prefill"])
    left.plot(lens, [n / seconds["prefill"][n] for n in lens], "s-", color="tab:purple")
    left.set_xlabel("prompt tokens in one prefill (batch 1)")
    left.set_ylabel("tokens per second")
    left.set_title("prefill: one pass over the prompt")
    batches = list(seconds["decode"])
    right.plot(batches, [b / seconds["decode"][b] for b in batches], "o-", color="tab:blue")
    right.set_xlabel(f"sequences per decode step ({CONTEXT} tokens cached each)")
    right.set_title("decode: one token per sequence")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"Target model, measured on {get_device().type} when this page was built")
    return fig


def figure() -> Figure:
    return plot(measure())
