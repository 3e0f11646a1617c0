"""Fused projections: query, key and value in one matrix multiply, the MLP's gate and up in another.

The three projections of an attention layer read the same input, and so do the MLP's
gate and up projections. Stacking their weights makes one wider matrix multiply of each
group: a decode step runs 17 multiplies instead of 29 (for four layers and the output
head), each with more columns, and with few rows a multiply's cost is mostly the call,
not the arithmetic (`benchmarks/profile_engine.py`'s Part 4 prints both libraries' rates
by rows). vLLM's models are written this way: ``LlamaAttention.qkv_proj`` is a
``QKVParallelLinear`` and ``LlamaMLP.gate_up_proj`` a ``MergedColumnParallelLinear``, and
loading a checkpoint stacks its ``q_proj``, ``k_proj``, ``v_proj`` (and ``gate_proj``,
``up_proj``) weights into them (``LlamaModel.hf_to_vllm_mapper`` in vLLM 0.32's
``models/llama.py``).

Our model keeps Hugging Face's separate layers, so that its weights load and save as they
are; `fuse_projections` changes a model in place, each `Attention` into a `FusedAttention`
and each `MLP` into a `FusedMLP`. The engine fuses its own copy of the model
(`llmserve_ref.engine.model_runner`), which shares the model's other weights; the stacked
ones are copies, so the engine holds most of the weights a second time. Each output
column is the same dot product as before, though a kernel of another shape may sum it in
another order: the logits agree to float32 rounding, and the greedy tokens with
`generate`'s (tests/engine/test_engine_core.py).

>>> import copy
>>> import torch
>>> from llmserve_ref.model.weights import load_target
>>> model = load_target("cpu")[0]  # 8 query heads and 2 key-value heads of 32
>>> fused = fuse_projections(copy.deepcopy(model))
>>> fused.decoder_layers[0].self_attn.qkv_proj  # 256 query, 64 key and 64 value features
Linear(in_features=256, out_features=384, bias=False)
>>> ids = torch.tensor([[3, 1, 4, 1, 5]])
>>> torch.allclose(fused(ids), model(ids), atol=1e-5)
True
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from llmserve_ref.model.llama import MLP, Attention, Llama


def stacked(*layers: nn.Linear) -> nn.Linear:
    """One layer whose output is the `layers`' outputs side by side (their weights copied)."""
    weight = torch.cat([layer.weight.detach() for layer in layers])
    fused = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    fused.weight = nn.Parameter(weight, requires_grad=False)
    return fused


# --8<-- [start:fused]
class FusedAttention(Attention):
    """`Attention` whose query, key and value projections are one multiply, ``qkv_proj``."""

    qkv_proj: nn.Linear
    qkv_sizes: list[int]

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        return q, k, v


class FusedMLP(MLP):
    """`MLP` whose gate and up projections are one multiply, ``gate_up_proj``."""

    gate_up_proj: nn.Linear

    def gate_up(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return gate, up


# --8<-- [end:fused]


def fuse_projections(model: Llama) -> Llama:
    """Fuse each layer's projections, in place; return `model`."""
    for module in list(model.modules()):
        if type(module) is Attention:
            _fuse_attention(module)
        elif type(module) is MLP:
            _fuse_mlp(module)
    return model


# Each module becomes its fused subclass in place: the same attributes, one method changed.
def _fuse_attention(attention: Attention) -> None:
    layers = (attention.q_proj, attention.k_proj, attention.v_proj)
    attention.__class__ = FusedAttention
    fused = cast(FusedAttention, attention)
    fused.qkv_proj = stacked(*layers)
    fused.qkv_sizes = [layer.out_features for layer in layers]
    del fused.q_proj, fused.k_proj, fused.v_proj


def _fuse_mlp(mlp: MLP) -> None:
    layers = (mlp.gate_proj, mlp.up_proj)
    mlp.__class__ = FusedMLP
    fused = cast(FusedMLP, mlp)
    fused.gate_up_proj = stacked(*layers)
    del fused.gate_proj, fused.up_proj
