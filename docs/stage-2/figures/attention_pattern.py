"""Attention weights of two heads of the target model on one sentence, as heatmaps."""

import torch
from matplotlib.figure import Figure

from llmserve_ref.device import get_device
from llmserve_ref.model.attention_probe import attention_weights, capture_qkv
from llmserve_ref.model.weights import load_target
from llmserve_ref.planning.measure import torch_threads

TEXT = "Once upon a time, there was a shy fox named Leo. One day, Leo found a red ball. Leo"
HEADS = ((0, 5), (2, 3))  # (layer, query head)


def figure() -> Figure:
    """One heatmap per head: row = query token, column = key token, colour = weight."""
    model, tokenizer = load_target(get_device())
    ids = torch.tensor([tokenizer.encode(TEXT, add_bos=True)])
    labels = [tokenizer.decode([i]).strip() or "␣" for i in ids[0].tolist()]
    fig = Figure(figsize=(9, 4.9), layout="constrained")
    axes = fig.subplots(1, len(HEADS))
    for ax, (layer, head) in zip(axes, HEADS, strict=True):
        with torch_threads(1):
            qkv = capture_qkv(model, ids, layer)
        weights = attention_weights(qkv.q, qkv.k)[0, head].cpu()
        image = ax.imshow(weights.numpy(), cmap="Blues", vmin=0, vmax=1)
        ticks = range(len(labels))
        ax.set_xticks(ticks, labels, rotation=90, fontsize=7)
        ax.set_yticks(ticks, labels, fontsize=7)
        ax.set_xlabel("key (a token of the past)")
        ax.set_ylabel("query (the token attending)")
        ax.set_title(f"layer {layer}, head {head}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.7, label="attention weight")
    fig.suptitle(
        "Each row sums to 1; everything right of the diagonal is masked (weight 0)", fontsize=10
    )
    return fig
