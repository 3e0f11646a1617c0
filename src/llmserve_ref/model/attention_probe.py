"""Read a layer's queries, keys, values and attention weights out of the model, unchanged.

`Llama`'s attention computes its weights and uses them at once; nothing keeps them. To
look at them (an attention heatmap) or to experiment with one layer's queries and keys,
we record what one layer's attention module receives, with a forward pre-hook (PyTorch's
way to observe a module without editing it), and recompute its queries, keys and values
with that module's own projections and RoPE. The forward pass itself runs as always.
The tests check the recomputation against the model: the recomputed weights, applied to
the values and projected by ``o_proj``, give back the module's own output.

>>> import torch
>>> from llmserve_ref.model.llama import Llama
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> _ = torch.manual_seed(0)
>>> model = Llama(ModelConfig(vocab_size=16, hidden_size=16, intermediate_size=32,
...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
>>> qkv = capture_qkv(model, torch.tensor([[1, 2, 3]]), layer=0)
>>> qkv.q.shape, qkv.k.shape
(torch.Size([1, 2, 3, 8]), torch.Size([1, 1, 3, 8]))
>>> weights = attention_weights(qkv.q, qkv.k)
>>> weights.shape  # [batch, heads, queries, keys]
torch.Size([1, 2, 3, 3])
>>> (weights[0, 0] > 0).int()  # query i sees keys 0..i: nothing right of the diagonal
tensor([[1, 0, 0],
        [1, 1, 0],
        [1, 1, 1]], dtype=torch.int32)
>>> torch.allclose(weights.sum(dim=-1), torch.ones(1, 2, 3))  # each row: a distribution
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from llmserve_ref.model.llama import Llama


# --8<-- [start:qkv]
@dataclass
class QKV:
    """One attention layer's inputs and output for a batch of token sequences."""

    q: torch.Tensor  # [batch, heads, T, head_dim], rotated by RoPE
    k: torch.Tensor  # [batch, kv_heads, T, head_dim], rotated by RoPE
    v: torch.Tensor  # [batch, kv_heads, T, head_dim]
    positions: torch.Tensor  # [T]
    output: torch.Tensor  # what the attention module returned, [batch, T, hidden]


@torch.inference_mode()
def capture_qkv(model: Llama, input_ids: torch.Tensor, layer: int) -> QKV:
    """Run `model` on `input_ids` (``[batch, T]``) and return layer `layer`'s q, k, v."""
    layers = model.decoder_layers
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer must be in 0..{len(layers) - 1} for this model, got {layer}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, T], got shape {tuple(input_ids.shape)}")
    attn = layers[layer].self_attn
    seen: dict = {}
    handles = [
        attn.register_forward_pre_hook(lambda module, args: seen.update(args=args)),
        attn.register_forward_hook(lambda module, args, out: seen.update(output=out)),
    ]
    try:
        model(input_ids.to(model.device))
    finally:
        for handle in handles:
            handle.remove()
    x, rope, positions = seen["args"][:3]
    batch, T, _ = x.shape

    def heads(proj: torch.nn.Linear, n: int) -> torch.Tensor:
        return proj(x).view(batch, T, n, attn.head_dim).transpose(1, 2)

    q = rope(heads(attn.q_proj, attn.num_heads), positions)
    k = rope(heads(attn.k_proj, attn.num_kv_heads), positions)
    return QKV(q, k, heads(attn.v_proj, attn.num_kv_heads), positions, seen["output"])


# --8<-- [end:qkv]


# --8<-- [start:weights]
def attention_weights(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """Causal ``softmax(q kᵀ / √d)`` per query head, ``[batch, heads, T, S]``.

    q is ``[batch, heads, T, d]`` at `positions` (default: the last T of the S key
    positions); k is ``[batch, kv_heads, S, d]``. Query head h reads K/V head
    ``h // (heads / kv_heads)``, as grouped-query attention does.
    """
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} K/V heads evenly")
    T, S = q.shape[2], k.shape[2]
    if positions is None:
        positions = torch.arange(S - T, S, device=q.device)
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    visible = torch.arange(S, device=q.device) <= positions.unsqueeze(-1)  # [T, S]
    return scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)


# --8<-- [end:weights]
