"""The model catalog against the published `config.json` files, typed in here by hand.

`PUBLISHED` holds, for each model, the fields of its Hugging Face `config.json` that KV and
weight arithmetic read, typed from the files themselves (as tests/planning/test_hardware.py types
the datasheets' figures), so the catalog is checked against them rather than against a
copy of itself. The parameter counts are computed here from those fields and held to the
rounded figure on each model card. What `kv_math` computes from the configs is
tests/planning/test_kv_math.py's.
"""

from __future__ import annotations

import json

import pytest

from llmserve_ref.planning.hardware import GPUS
from llmserve_ref.planning.kv_math import DTYPE_BITS
from llmserve_ref.planning.model_catalog import (
    MODELS,
    catalog_as_json,
    config_as_dict,
    match_config,
    model,
)
from llmserve_ref.planning.model_shape import from_hf_config


def llama_like(hidden, intermediate, layers, heads, kv_heads, vocab, max_positions) -> dict:
    return {
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "max_position_embeddings": max_positions,
        "tie_word_embeddings": False,
    }


# Hugging Face repository -> the fields of its config.json, as published.
PUBLISHED = {
    "meta-llama/Llama-2-7b-hf": {
        "model_type": "llama",
        **llama_like(4096, 11008, 32, 32, 32, 32000, 4096),
    },
    "meta-llama/Llama-3.1-8B": {
        "model_type": "llama",
        **llama_like(4096, 14336, 32, 32, 8, 128256, 131072),
    },
    "meta-llama/Llama-3.1-70B": {
        "model_type": "llama",
        **llama_like(8192, 28672, 80, 64, 8, 128256, 131072),
    },
    "meta-llama/Llama-3.1-405B": {
        "model_type": "llama",
        **llama_like(16384, 53248, 126, 128, 8, 128256, 131072),
    },
    "mistralai/Mistral-7B-v0.3": {
        "model_type": "mistral",
        **llama_like(4096, 14336, 32, 32, 8, 32768, 32768),
        "sliding_window": None,
    },
    "Qwen/Qwen2.5-7B": {
        "model_type": "qwen2",
        **llama_like(3584, 18944, 28, 28, 4, 152064, 131072),
    },
    "Qwen/Qwen2.5-72B": {
        "model_type": "qwen2",
        **llama_like(8192, 29568, 80, 64, 8, 152064, 131072),
    },
    "deepseek-ai/DeepSeek-V3": {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "first_k_dense_replace": 3,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "num_nextn_predict_layers": 1,
        "tie_word_embeddings": False,
    },
}

# Parameter counts as the model cards round them.
MODEL_CARD_PARAMETERS = {
    "Llama-2-7B": 6.74e9,
    "Llama-3.1-8B": 8.03e9,
    "Llama-3.1-70B": 70.6e9,
    "Llama-3.1-405B": 406e9,
    "Mistral-7B-v0.3": 7.25e9,
    "Qwen2.5-7B": 7.61e9,
    "Qwen2.5-72B": 72.7e9,
    "DeepSeek-V3": 671e9,
}


def test_the_catalog_is_the_published_models():
    assert [m.source for m in MODELS] == list(PUBLISHED)
    assert [m.name for m in MODELS] == list(MODEL_CARD_PARAMETERS)


@pytest.mark.parametrize("catalog_model", MODELS, ids=lambda m: m.name)
def test_config_fields_are_the_published_ones(catalog_model):
    assert catalog_model.config_json == PUBLISHED[catalog_model.source]
    assert "head_dim" not in catalog_model.config_json  # none of these files has one
    assert catalog_model.url == f"https://huggingface.co/{catalog_model.source}"


@pytest.mark.parametrize("catalog_model", MODELS, ids=lambda m: m.name)
def test_the_shape_is_read_from_the_published_fields(catalog_model):
    published = PUBLISHED[catalog_model.source]
    shape = catalog_model.config
    assert shape == from_hf_config(published, name=catalog_model.name)
    assert (shape.num_layers, shape.num_kv_heads) == (
        published["num_hidden_layers"],
        published["num_key_value_heads"],
    )
    assert config_as_dict(shape) == {
        "num_layers": shape.num_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_kv_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "kv_lora_rank": shape.kv_lora_rank,
        "qk_rope_head_dim": shape.qk_rope_head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
    }


def test_model_finds_a_name_in_any_case_and_lists_the_catalog_otherwise():
    assert model("llama-3.1-8b") is model("LLAMA-3.1-8B") is MODELS[1]
    with pytest.raises(ValueError, match=r"unknown model 'GPT-5'; choose one of Llama-2-7B, "):
        model("GPT-5")


def test_match_config_needs_every_published_field_and_ignores_the_rest():
    published = dict(PUBLISHED["meta-llama/Llama-3.1-8B"])
    extra = {**published, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}
    assert match_config(extra) is model("Llama-3.1-8B")
    assert match_config({**published, "num_key_value_heads": 4}) is None
    del published["vocab_size"]
    assert match_config(published) is None
    # Mistral's published `sliding_window: null` is a field like any other.
    mistral = PUBLISHED["mistralai/Mistral-7B-v0.3"]
    assert match_config(mistral) is model("Mistral-7B-v0.3")
    assert match_config({**mistral, "sliding_window": 4096}) is None


def _dense_parameters(c: dict) -> int:
    """Parameters of a Llama/Mistral/Qwen2 decoder from its config.json (Qwen2 has q/k/v biases)."""
    hidden, heads, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim
    if c["model_type"] == "qwen2":
        attention += heads * head_dim + 2 * kv * head_dim
    layer = attention + 3 * hidden * c["intermediate_size"] + 2 * hidden
    embeddings = c["vocab_size"] * hidden * (1 if c["tie_word_embeddings"] else 2)
    return c["num_hidden_layers"] * layer + embeddings + hidden


def _deepseek_v3_parameters(c: dict) -> int:
    """Main-model parameters of DeepSeek-V3 (MLA + DeepSeekMoE), MTP module excluded."""
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    q_head = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    attention = (
        hidden * c["q_lora_rank"]
        + c["q_lora_rank"]  # q down + norm
        + c["q_lora_rank"] * heads * q_head  # q up
        + hidden * (c["kv_lora_rank"] + c["qk_rope_head_dim"])  # kv down
        + c["kv_lora_rank"]  # kv norm
        + c["kv_lora_rank"] * heads * (c["qk_nope_head_dim"] + c["v_head_dim"])
        + heads * c["v_head_dim"] * hidden
    )  # out
    dense_mlp = 3 * hidden * c["intermediate_size"]
    experts = c["n_routed_experts"] + c["n_shared_experts"]
    moe_mlp = experts * 3 * hidden * c["moe_intermediate_size"] + c["n_routed_experts"] * (
        hidden + 1
    )  # router weights and its bias correction
    dense = c["first_k_dense_replace"]
    layers = dense * (attention + dense_mlp + 2 * hidden) + (c["num_hidden_layers"] - dense) * (
        attention + moe_mlp + 2 * hidden
    )
    return layers + 2 * c["vocab_size"] * hidden + hidden


@pytest.mark.parametrize("catalog_model", MODELS, ids=lambda m: m.name)
def test_parameter_counts(catalog_model):
    c = PUBLISHED[catalog_model.source]
    counted = (
        _deepseek_v3_parameters(c) if c["model_type"] == "deepseek_v3" else _dense_parameters(c)
    )
    assert catalog_model.num_parameters == counted
    card = MODEL_CARD_PARAMETERS[catalog_model.name]
    assert abs(catalog_model.num_parameters - card) / card < 0.005


def test_catalog_json_is_what_the_calculator_needs():
    data = json.loads(catalog_as_json())
    assert [m["name"] for m in data["models"]] == [m.name for m in MODELS]
    for entry, m in zip(data["models"], MODELS, strict=True):
        cfg = m.config
        assert entry["num_kv_heads"] == cfg.num_kv_heads
        assert entry["head_dim"] == cfg.head_dim
        assert entry["kv_lora_rank"] == cfg.kv_lora_rank
        assert entry["num_parameters"] == m.num_parameters
    assert {g["name"]: g["memory_bytes"] for g in data["gpus"]} == {
        g.name: g.memory_bytes for g in GPUS
    }
    assert data["dtype_bits"] == DTYPE_BITS


def test_catalog_json_starts_the_calculator_at_vllms_default_and_names_sources():
    data = json.loads(catalog_as_json())
    assert data["gpu_memory_utilization"] == 0.92  # vLLM's CacheConfig default
    assert {m["source"] for m in data["models"]} == set(PUBLISHED)
    assert all(g["source"].startswith("https://") for g in data["gpus"])
    assert set(data["models"][0]) == {"name", "source", "num_parameters"} | set(
        config_as_dict(MODELS[0].config)
    )
