"""The target model's next-token distribution after two prompts: its ten most likely tokens."""

import torch
from matplotlib.figure import Figure

from llmserve_ref.device import get_device
from llmserve_ref.model.weights import load_target
from llmserve_ref.planning.measure import torch_threads

PROMPTS = ("Once upon a time, there was a", "One day, Mia found a")
TOP = 10


@torch.inference_mode()
def figure() -> Figure:
    """One bar chart per prompt: the probability of each of the top ten next tokens."""
    model, tokenizer = load_target(get_device())
    fig = Figure(figsize=(7.5, 3.4), layout="constrained")
    axes = fig.subplots(1, len(PROMPTS))
    for ax, prompt in zip(axes, PROMPTS, strict=True):
        ids = torch.tensor([tokenizer.encode(prompt, add_bos=True)], device=model.device)
        with torch_threads(1):
            probs = model(ids)[0, -1].softmax(dim=-1).cpu()
        top = probs.topk(TOP)
        labels = [repr(tokenizer.decode([int(i)])) for i in top.indices]
        ax.barh(range(TOP), top.values.numpy(), color="tab:blue")
        ax.set_yticks(range(TOP), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("probability of the next token")
        ax.set_title(f"“{prompt} …”\ntop {TOP} hold {float(top.values.sum()):.0%}", fontsize=9)
    fig.suptitle(
        f"The tiny target model's next token ({tokenizer.vocab_size} tokens in all)", fontsize=10
    )
    return fig
