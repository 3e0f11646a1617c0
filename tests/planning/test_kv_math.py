"""KV cache size math against published configs, with every expected value computed here.

The expected numbers are written out from each model's config.json fields (layers,
KV heads, head dim, MLA latent widths) rather than taken from `kv_math`, so a wrong
formula in the package cannot agree with itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from llmserve_ref.planning.hardware import GIB, GPUS, gpu
from llmserve_ref.planning.kv_math import (
    DTYPE_BITS,
    KVFormat,
    format_bytes,
    kv_bytes_per_batch,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_cache_budget,
    max_kv_tokens,
    sequences_that_fit,
    weight_bytes,
)
from llmserve_ref.planning.model_catalog import MODELS, match_config, model
from llmserve_ref.planning.model_shape import ModelShape, from_hf_config

ROOT = Path(__file__).resolve().parents[2]
SNIPPET_CONFIG = ROOT / "snippets" / "kv-cache-size-math" / "llama-3.1-8b.config.json"

# Bytes per token in bf16, written as 2 (K and V) × layers × KV heads × head dim × 2 bytes,
# or for MLA as (kv_lora_rank + qk_rope_head_dim) × layers × 2 bytes.
PUBLISHED_BF16_BYTES_PER_TOKEN = {
    "Llama-2-7B": 2 * 32 * 32 * 128 * 2,
    "Llama-3.1-8B": 2 * 32 * 8 * 128 * 2,
    "Llama-3.1-70B": 2 * 80 * 8 * 128 * 2,
    "Llama-3.1-405B": 2 * 126 * 8 * 128 * 2,
    "Mistral-7B-v0.3": 2 * 32 * 8 * 128 * 2,
    "Qwen2.5-7B": 2 * 28 * 4 * 128 * 2,
    "Qwen2.5-72B": 2 * 80 * 8 * 128 * 2,
    "DeepSeek-V3": (512 + 64) * 61 * 2,
}


def test_catalog_covers_every_published_figure():
    assert {m.name for m in MODELS} == set(PUBLISHED_BF16_BYTES_PER_TOKEN)


@pytest.mark.parametrize("name", PUBLISHED_BF16_BYTES_PER_TOKEN)
def test_bytes_per_token_matches_the_published_shape(name):
    assert kv_bytes_per_token(model(name).config, "bf16") == PUBLISHED_BF16_BYTES_PER_TOKEN[name]


def test_headline_numbers():
    assert kv_bytes_per_token(model("Llama-3.1-8B").config, "bf16") == 131072 == 128 * 1024
    assert kv_bytes_per_token(model("Llama-2-7B").config, "fp16") == 512 * 1024
    assert kv_bytes_per_token(model("DeepSeek-V3").config, "bf16") == (512 + 64) * 61 * 2


def test_gqa_never_multiplies_by_query_heads():
    cfg = model("Llama-3.1-70B").config  # 64 query heads share 8 KV heads
    assert kv_bytes_per_token(cfg) == 2 * 80 * 8 * 128 * 2
    assert kv_bytes_per_token(cfg) != 2 * 80 * 64 * 128 * 2
    fewer_query_heads = replace(cfg, num_attention_heads=16)
    assert kv_bytes_per_token(fewer_query_heads) == kv_bytes_per_token(cfg)


def test_mla_caches_the_latent_not_the_heads():
    ds = model("DeepSeek-V3").config
    assert (ds.kv_lora_rank, ds.qk_rope_head_dim, ds.num_layers) == (512, 64, 61)
    # The 128 KV heads of its config play no part in what is cached.
    assert kv_bytes_per_token(replace(ds, num_kv_heads=1)) == kv_bytes_per_token(ds)
    as_mha = replace(ds, kv_lora_rank=0, qk_rope_head_dim=0)
    assert kv_bytes_per_token(as_mha) == 2 * 61 * 128 * 128 * 2


def test_precisions():
    cfg = model("Llama-3.1-8B").config
    per_element = {d: kv_bytes_per_token(cfg, d) / (2 * 32 * 8 * 128) for d in DTYPE_BITS}
    assert per_element == {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


def test_group_scales_are_counted_only_when_asked():
    cfg = model("Llama-3.1-8B").config
    elements = 2 * 8 * 128  # per layer per token
    plain = kv_bytes_per_token(cfg, "int4")
    grouped = kv_bytes_per_token(cfg, KVFormat("int4", group_size=32, scale_bytes=4))
    assert plain == 32 * elements // 2
    assert grouped == 32 * (elements // 2 + elements // 32 * 4)


def test_sequence_and_batch_scale_linearly():
    cfg = model("Llama-3.1-8B").config
    assert kv_bytes_per_sequence(cfg, 8192) == 8192 * 131072 == GIB
    assert kv_bytes_per_batch(cfg, 8192, 32) == 32 * GIB
    assert kv_bytes_per_sequence(cfg, 0) == 0


def test_sequences_that_fit_on_an_h100():
    cfg = model("Llama-3.1-8B").config
    usable = math.floor(80 * 2**30 * 0.92)  # vLLM 0.32's default gpu_memory_utilization
    weights = 8_030_261_248 * 2
    budget = kv_cache_budget(gpu("H100-SXM").memory_bytes, weight_bytes(8_030_261_248))
    assert budget == usable - weights
    assert max_kv_tokens(cfg, budget) == (usable - weights) // 131072
    for context in (1, 2048, 8192, 131072):
        expected = (usable - weights) // (context * 131072)
        assert sequences_that_fit(cfg, context, budget) == expected
    assert sequences_that_fit(cfg, 8192, budget, "fp8") == (usable - weights) // (8192 * 65536)


def test_weights_that_do_not_fit_leave_no_room():
    big = model("Llama-3.1-70B")
    budget = kv_cache_budget(gpu("H100-SXM").memory_bytes, weight_bytes(big.num_parameters))
    assert budget < 0
    assert sequences_that_fit(big.config, 8192, budget) == 0


def test_tensor_parallel_splits_kv_heads_but_not_the_mla_latent():
    llama = model("Llama-3.1-70B").config  # 8 KV heads
    total = kv_bytes_per_token(llama)
    assert kv_bytes_per_token(llama, tensor_parallel=4) == total // 4
    assert kv_bytes_per_token(llama, tensor_parallel=8) == total // 8
    assert kv_bytes_per_token(llama, tensor_parallel=16) == total // 8  # one head copied per GPU
    ds = model("DeepSeek-V3").config
    assert kv_bytes_per_token(ds, tensor_parallel=8) == kv_bytes_per_token(ds)
    budget = kv_cache_budget(80 * GIB, 1000, tensor_parallel=4)
    assert budget == math.floor(80 * GIB * 0.92) - 250


def test_snippet_config_is_the_catalog_model():
    published = json.loads(SNIPPET_CONFIG.read_text(encoding="utf-8"))
    assert match_config(published) is model("Llama-3.1-8B")
    assert from_hf_config(published, name="Llama-3.1-8B") == model("Llama-3.1-8B").config


def test_weight_bytes():
    assert weight_bytes(8_030_261_248, "bf16") == 16_060_522_496
    assert weight_bytes(671_026_419_200, "fp8") == 671_026_419_200
    assert weight_bytes(3, "int4") == 2  # 12 bits round up to 2 bytes


def test_gpu_memory_is_binary():
    expected_gib = {
        "L4": 24,
        "A100-SXM-40GB": 40,
        "A100-SXM-80GB": 80,
        "H100-SXM": 80,
        "H200-SXM": 141,
        "B200": 180,
        "MI300X": 192,
    }
    assert {g.name: g.memory_bytes for g in GPUS} == {
        n: gib * 2**30 for n, gib in expected_gib.items()
    }
    assert all(g.source.startswith("https://") for g in GPUS)


def test_format_bytes():
    assert format_bytes(0) == "0 B"
    assert format_bytes(131072) == "128 KiB"
    assert format_bytes(1152) == "1.13 KiB"  # 1.125 rounds half up
    assert format_bytes(GIB + 1) == "1.00 GiB"
    assert format_bytes(1024**5) == "1024 TiB"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: kv_bytes_per_sequence(model("Llama-3.1-8B").config, -1),
            "context length must be zero or more",
        ),
        (
            lambda: kv_bytes_per_sequence(model("Llama-2-7B").config, 8192),
            "takes at most 4096 tokens",
        ),
        (
            lambda: kv_bytes_per_token(model("Llama-3.1-8B").config, "fp7"),
            "unknown precision 'fp7'; use one of fp32",
        ),
        (lambda: weight_bytes(10, "q4_k"), "unknown precision"),
        (
            lambda: replace(model("Llama-3.1-8B").config, num_kv_heads=3),
            "3 KV heads do not divide 32 attention heads",
        ),
        (
            lambda: replace(model("Llama-3.1-8B").config, num_layers=0),
            "num_layers must be positive",
        ),
        (
            lambda: kv_bytes_per_token(model("Llama-3.1-8B").config, tensor_parallel=3),
            "must be a positive divisor of its 32 attention heads",
        ),
        (
            lambda: kv_bytes_per_token(
                ModelShape("x", 2, 48, 12, 64, 3072, 10, 10), tensor_parallel=16
            ),
            "tensor_parallel=16 neither divides nor is a multiple of its 12 KV heads",
        ),
        (
            lambda: kv_bytes_per_batch(model("Llama-3.1-8B").config, 8, -2),
            "batch size must be zero or more",
        ),
        (lambda: sequences_that_fit(model("Llama-3.1-8B").config, 0, GIB), "at least one token"),
        (
            lambda: kv_cache_budget(80 * GIB, 0, gpu_memory_utilization=90),
            "gpu_memory_utilization is a fraction",
        ),
        (
            lambda: kv_bytes_per_token(model("Llama-3.1-8B").config, KVFormat("int4", 48)),
            "group_size 48 does not divide the 2048 elements",
        ),
        (lambda: from_hf_config({"hidden_size": 4096}), "config.json has no num_hidden_layers"),
        (
            lambda: from_hf_config(
                {
                    "num_hidden_layers": 2,
                    "num_attention_heads": 3,
                    "hidden_size": 100,
                    "vocab_size": 10,
                    "max_position_embeddings": 10,
                }
            ),
            "add the model's head_dim",
        ),
        (lambda: weight_bytes(-1), "parameter count must be zero or more"),
        (lambda: gpu("H300"), "unknown GPU 'H300'; choose one of L4"),
        (lambda: model("GPT-5"), "unknown model 'GPT-5'; choose one of"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        call()
