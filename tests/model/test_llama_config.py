"""The tiny Llama's config: Hugging Face's names and defaults, and its KV bytes per token."""

from __future__ import annotations

import json

import pytest
import torch

from llmserve_ref.model.llama_config import ModelConfig

ATOL = 1e-5  # fp32


def test_head_dim_defaults_to_hidden_over_heads_and_may_be_set(tiny_llama):
    assert ModelConfig(hidden_size=64, num_attention_heads=4).head_dim == 16
    model = tiny_llama(head_dim=32)  # wider heads than hidden / heads = 16
    assert model.model["layers"][0].self_attn.q_proj.weight.shape == (4 * 32, 64)
    assert model.model["layers"][0].self_attn.k_proj.weight.shape == (2 * 32, 64)
    assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_config_round_trips_through_config_json(tiny_llama, dtype):
    config = tiny_llama(rope_theta=500000.0, tie_word_embeddings=False).config
    written = json.loads(json.dumps(config.to_hf_dict(dtype)))  # as a file holds it
    assert ModelConfig.from_hf_dict(written) == config
    assert written["torch_dtype"] == str(dtype).removeprefix("torch.")
    assert (written["architectures"], written["model_type"]) == (["LlamaForCausalLM"], "llama")
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 500000.0}
    # Fields we do not use are ignored, and what a file leaves out takes our default.
    assert ModelConfig.from_hf_dict({**written, "hidden_act": "gelu", "new": 1}) == config
    assert ModelConfig.from_hf_dict({"hidden_size": 64, "num_attention_heads": 4}).head_dim == 16


def test_kv_bytes_per_token_is_the_formula_and_what_a_cache_holds(tiny_llama):
    config = tiny_llama().config  # 2 layers, 2 K/V heads of 16 dims
    assert config.kv_bytes_per_token() == 2 * 2 * 2 * 16 * 4  # layers × (K, V) × heads × dim × 4 B
    assert config.kv_bytes_per_token(torch.bfloat16) == 2 * 2 * 2 * 16 * 2
    for dtype in (torch.float32, torch.bfloat16):
        model = tiny_llama().to(dtype)
        assert model.make_cache(3, 10).nbytes == 3 * 10 * config.kv_bytes_per_token(dtype)
