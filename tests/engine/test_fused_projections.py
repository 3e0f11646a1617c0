"""Fused projections: the fused model computes what the model computes, with fewer, wider layers.

The oracle is the model itself, unfused: the same weights stacked, the same logits (to
float32 rounding: another multiply shape may sum in another order), and, where the engine
fuses its own copy, the model left as it was. Greedy tokens through the engine, which runs
the fused copy, are checked against `generate` in test_engine_core.py.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from llmserve_ref.engine.fused_projections import FusedAttention, FusedMLP, fuse_projections
from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.model.llama import MLP, Attention, Llama
from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.model.weights import load_target


def linear_layers(model: nn.Module) -> int:
    return sum(isinstance(m, nn.Linear) for m in model.modules())


@pytest.mark.parametrize("kv_heads", [1, 2, 4])  # MQA, GQA, MHA: other q/k/v widths
def test_the_fused_model_gives_the_models_logits(kv_heads: int) -> None:
    torch.manual_seed(kv_heads)
    config = ModelConfig(
        vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=kv_heads,
    )  # fmt: skip
    model = Llama(config).eval()
    fused = fuse_projections(copy.deepcopy(model))
    ids = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected, found = model(ids), fused(ids)
    assert torch.allclose(found, expected, atol=1e-5), (found - expected).abs().max()
    # With a KV cache, one token at a time, as decoding runs it.
    cache, fused_cache = model.make_cache(2, 8), fused.make_cache(2, 8)
    with torch.inference_mode():
        for t in range(7):
            step = ids[:, t : t + 1]
            assert torch.allclose(fused(step, fused_cache), model(step, cache), atol=1e-5)


def test_the_engines_copy_stacks_the_weights_shares_the_rest_and_leaves_the_model_alone() -> None:
    model = load_target("cpu")[0]
    before = {name: p.clone() for name, p in model.named_parameters()}
    fused = ModelRunner(model, num_blocks=4, block_size=16).model  # fused (and packed)
    layers = model.decoder_layers
    for layer, fused_layer in zip(layers, fused.decoder_layers, strict=True):
        attention, mlp = fused_layer.self_attn, fused_layer.mlp
        assert isinstance(attention, FusedAttention) and isinstance(mlp, FusedMLP)
        original = layer.self_attn
        qkv = torch.cat([original.q_proj.weight, original.k_proj.weight, original.v_proj.weight])
        assert torch.equal(attention.qkv_proj.weight, qkv)
        gate_up = torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])
        assert torch.equal(mlp.gate_up_proj.weight, gate_up)
        assert attention.o_proj.weight is original.o_proj.weight  # shared, not copied
        assert mlp.down_proj.weight is layer.mlp.down_proj.weight
        assert not hasattr(attention, "q_proj") and not hasattr(mlp, "gate_proj")
    assert fused.lm_head.weight is model.lm_head.weight
    # The model keeps its own classes, layers and values (Hugging Face's names, unfused).
    assert all(type(layer.self_attn) is Attention and type(layer.mlp) is MLP for layer in layers)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert linear_layers(model) == 29  # 7 multiplies per layer and the head
    assert linear_layers(fuse_projections(model)) == 17  # fused in place: 4 per layer, the head
