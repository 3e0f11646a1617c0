"""One next-token distribution of the target model, as each sampler reshapes it."""

import torch
from matplotlib.figure import Figure

from llmserve_ref.device import get_device
from llmserve_ref.model.sampling import min_p, temperature, top_k, top_p
from llmserve_ref.model.weights import load_target
from llmserve_ref.planning.measure import torch_threads

PROMPT = "Once upon a time, there was a"
SHOWN = 20  # the most likely tokens of the unchanged distribution, in its order
SAMPLERS = {
    "as the model gives it (T = 1)": lambda z: z,
    "temperature 0.5": lambda z: temperature(z, 0.5),
    "temperature 2.0": lambda z: temperature(z, 2.0),
    "top-k, k = 5": lambda z: top_k(z, 5),
    "top-p, p = 0.5": lambda z: top_p(z, 0.5),
    "min-p, p = 0.8": lambda z: min_p(z, 0.8),
}


@torch.inference_mode()
def figure() -> Figure:
    """Six bar charts over the same 20 tokens: probabilities after each sampler."""
    model, tokenizer = load_target(get_device())
    ids = torch.tensor([tokenizer.encode(PROMPT, add_bos=True)], device=model.device)
    with torch_threads(1):
        logits = model(ids)[0, -1].float().cpu()
    order = logits.argsort(descending=True)[:SHOWN]
    labels = [tokenizer.decode([int(i)]).strip() for i in order]
    fig = Figure(figsize=(8, 5.6), layout="constrained")
    axes = fig.subplots(2, 3, sharex=True, sharey=True)
    for ax, (name, sampler) in zip(axes.flat, SAMPLERS.items(), strict=True):
        probs = sampler(logits).softmax(dim=-1)
        kept = int((probs > 0).sum())
        shown = probs[order]
        ax.bar(range(SHOWN), shown.numpy(), color=["tab:blue" if p > 0 else "0.8" for p in shown])
        mass = float(shown.sum())
        ax.set_title(f"{name}\n{kept} of {len(probs)} kept; these {SHOWN}: {mass:.0%}", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xticks(range(SHOWN), labels, rotation=90, fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("probability")
    fig.suptitle(f"The next token after “{PROMPT}”: the {SHOWN} most likely", fontsize=10)
    return fig
