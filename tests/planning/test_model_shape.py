"""A model's attention shape from its config.json: MHA, GQA, MQA and MLA, round trips."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmserve_ref.planning.kv_math import (
    kv_bytes_per_token,
)
from llmserve_ref.planning.model_catalog import MODELS, match_config, model
from llmserve_ref.planning.model_shape import ModelShape, from_hf_config, to_hf_config


def test_attention_kind_comes_from_kv_heads():
    llama3 = model("Llama-3.1-8B").config
    assert model("Llama-2-7B").config.attention == "MHA"
    assert llama3.attention == "GQA"
    mqa = replace(llama3, num_kv_heads=1)
    assert mqa.attention == "MQA"
    assert kv_bytes_per_token(mqa, "bf16") == 2 * 32 * 1 * 128 * 2
    assert model("DeepSeek-V3").config.attention == "MLA"


@pytest.mark.parametrize("catalog_model", MODELS, ids=lambda m: m.name)
def test_config_json_fields_round_trip(catalog_model):
    published = catalog_model.config_json
    cfg = from_hf_config(published, name=catalog_model.name)
    assert cfg.num_layers == published["num_hidden_layers"]
    assert cfg.num_attention_heads == published["num_attention_heads"]
    assert cfg.num_kv_heads == published["num_key_value_heads"]
    assert cfg.hidden_size == published["hidden_size"]
    assert cfg.vocab_size == published["vocab_size"]
    assert cfg.max_position_embeddings == published["max_position_embeddings"]
    if "kv_lora_rank" in published:
        assert (cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.head_dim) == (
            published["kv_lora_rank"],
            published["qk_rope_head_dim"],
            published["v_head_dim"],
        )
    else:
        assert cfg.head_dim == published.get(
            "head_dim", published["hidden_size"] // published["num_attention_heads"]
        )
    written = to_hf_config(cfg)
    assert {k: published[k] for k in written if k in published} == {
        k: v for k, v in written.items() if k in published
    }
    assert from_hf_config(written, name=cfg.name) == cfg
    assert match_config(dict(published)) is catalog_model


def test_config_json_defaults_and_nesting():
    base = {
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "hidden_size": 3072,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
    }
    assert from_hf_config(base).num_kv_heads == 16  # absent: MHA
    assert from_hf_config({**base, "num_key_value_heads": None}).num_kv_heads == 16
    assert from_hf_config(base).head_dim == 3072 // 16
    gemma_like = from_hf_config({**base, "head_dim": 256})  # Gemma-7B: head_dim != hidden/heads
    assert gemma_like.head_dim == 256
    assert kv_bytes_per_token(gemma_like) == 2 * 28 * 16 * 256 * 2
    assert from_hf_config({"model_type": "vlm", "text_config": base}) == from_hf_config(base)


def test_model_config_is_a_plain_value():
    cfg = ModelShape("toy", 2, 4, 2, 8, 32, 100, 64)
    assert cfg.attention == "GQA"
    assert kv_bytes_per_token(cfg, "fp32") == 2 * 2 * 2 * 8 * 4
