"""Which tiles a causal chunk of queries computes: bottom-right aligned, 16 x 16 tiles."""

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from llmserve_ref.kernels.flash_attention import causal_mask

Q_LEN, KV_LEN, BLOCK = 40, 100, 16


def figure() -> Figure:
    """40 new queries after 60 cached tokens: a chunked prefill against a KV cache."""
    mask = causal_mask(Q_LEN, KV_LEN).numpy()
    # 0: a tile the kernel never loads, 1: loaded but masked here, 2: a visible score.
    image = np.zeros(mask.shape)
    for m0 in range(0, Q_LEN, BLOCK):
        last_row = min(m0 + BLOCK, Q_LEN) - 1
        kv_end = min(KV_LEN, KV_LEN - Q_LEN + last_row + 1)
        loaded = -(-kv_end // BLOCK) * BLOCK  # whole key tiles, up to the last row's position
        image[m0 : m0 + BLOCK, :loaded] = 1
    image[mask] = 2
    fig = Figure(figsize=(7.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(
        image,
        cmap=ListedColormap(["#f2f2f2", "#f4b183", "#4472c4"]),
        aspect="equal",
        interpolation="nearest",
        extent=(0, KV_LEN, Q_LEN, 0),
    )
    for x in range(0, KV_LEN, BLOCK):
        ax.axvline(x, color="black", linewidth=0.5)
    for y in range(0, Q_LEN, BLOCK):
        ax.axhline(y, color="black", linewidth=0.5)
    ax.axvline(KV_LEN - Q_LEN, color="crimson", linestyle="--")
    ax.annotate(
        "cached keys | keys of the new queries",
        (KV_LEN - Q_LEN, -1),
        ha="center",
        fontsize=8,
        color="crimson",
        annotation_clip=False,
    )
    ax.set_xlabel(f"key position (kv_len = {KV_LEN})")
    ax.set_ylabel(f"query row (q_len = {Q_LEN})")
    ax.set_title(
        "blue: attended; orange: loaded, masked to -inf; grey: tile skipped", fontsize=9, pad=14
    )
    return fig
