"""Real models the pages compute with, each from its published `config.json`.

`config_json` holds the fields of the model's Hugging Face `config.json` that
KV and weight arithmetic read, copied as published (so a field the file leaves
out, like `head_dim` before Llama 3.2, is left out here too); `source` is the
repository it comes from. `num_parameters` is the exact count the config's
tensor shapes give (embedding, untied output head, every projection, bias and
norm), which agrees with the rounded figure on each model card. DeepSeek-V3's
count is its main model (671B in the technical report, arXiv:2412.19437),
without the 14B multi-token-prediction module shipped beside it, which serving
engines load only for speculative decoding.

>>> model("Llama-3.1-8B").config.attention
'GQA'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmserve_ref.planning.hardware import GPUS
from llmserve_ref.planning.kv_math import DTYPE_BITS
from llmserve_ref.planning.model_shape import ModelShape, from_hf_config
from llmserve_ref.planning.published import VLLM


@dataclass(frozen=True)
class CatalogModel:
    """A published model: short name, Hugging Face repository, parameter count, config fields."""

    name: str
    source: str
    num_parameters: int
    config_json: dict[str, Any]

    @property
    def config(self) -> ModelShape:
        return from_hf_config(self.config_json, name=self.name)

    @property
    def url(self) -> str:
        return f"https://huggingface.co/{self.source}"


def _llama_like(
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    max_positions: int,
) -> dict[str, Any]:
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


MODELS: tuple[CatalogModel, ...] = (
    CatalogModel(
        "Llama-2-7B",
        "meta-llama/Llama-2-7b-hf",
        6_738_415_616,
        {"model_type": "llama", **_llama_like(4096, 11008, 32, 32, 32, 32000, 4096)},
    ),
    CatalogModel(
        "Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B",
        8_030_261_248,
        {"model_type": "llama", **_llama_like(4096, 14336, 32, 32, 8, 128256, 131072)},
    ),
    CatalogModel(
        "Llama-3.1-70B",
        "meta-llama/Llama-3.1-70B",
        70_553_706_496,
        {"model_type": "llama", **_llama_like(8192, 28672, 80, 64, 8, 128256, 131072)},
    ),
    CatalogModel(
        "Llama-3.1-405B",
        "meta-llama/Llama-3.1-405B",
        405_853_388_800,
        {"model_type": "llama", **_llama_like(16384, 53248, 126, 128, 8, 128256, 131072)},
    ),
    # v0.3 rather than v0.1: v0.1's 4096-token sliding window would cap its cache.
    CatalogModel(
        "Mistral-7B-v0.3",
        "mistralai/Mistral-7B-v0.3",
        7_248_023_552,
        {
            "model_type": "mistral",
            **_llama_like(4096, 14336, 32, 32, 8, 32768, 32768),
            "sliding_window": None,
        },
    ),
    CatalogModel(
        "Qwen2.5-7B",
        "Qwen/Qwen2.5-7B",
        7_615_616_512,
        {"model_type": "qwen2", **_llama_like(3584, 18944, 28, 28, 4, 152064, 131072)},
    ),
    CatalogModel(
        "Qwen2.5-72B",
        "Qwen/Qwen2.5-72B",
        72_706_203_648,
        {"model_type": "qwen2", **_llama_like(8192, 29568, 80, 64, 8, 152064, 131072)},
    ),
    CatalogModel(
        "DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        671_026_419_200,
        {
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
    ),
)


def model(name: str) -> CatalogModel:
    """The catalog model called `name` (case does not matter).

    >>> model("deepseek-v3").config.kv_lora_rank
    512
    """
    for candidate in MODELS:
        if candidate.name.lower() == name.lower():
            return candidate
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(m.name for m in MODELS)}")


def match_config(config_json: dict[str, Any]) -> CatalogModel | None:
    """The catalog model whose published fields a config.json repeats exactly, if any."""
    for candidate in MODELS:
        if all(config_json.get(k, object()) == v for k, v in candidate.config_json.items()):
            return candidate
    return None


def config_as_dict(cfg: ModelShape) -> dict:
    """The fields of a config the page's calculator reads, as it receives them in JSON."""
    return {
        "num_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_kv_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "kv_lora_rank": cfg.kv_lora_rank,
        "qk_rope_head_dim": cfg.qk_rope_head_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
    }


def catalog_as_json() -> str:
    """The models, GPUs and dtypes the page's calculator offers, as JSON.

    The docs build writes this to `javascripts/kv-catalog.json`, so the
    calculator's list can never drift from the catalog the tests check, and its
    `gpu_memory_utilization` starts at vLLM's default (`planning.published.VLLM`).

    >>> data = json.loads(catalog_as_json())
    >>> data["models"][1]["name"], data["models"][1]["num_kv_heads"], data["dtype_bits"]["fp8"]
    ('Llama-3.1-8B', 8, 8)
    """
    models = [
        {
            "name": m.name,
            "source": m.source,
            "num_parameters": m.num_parameters,
            **config_as_dict(m.config),
        }
        for m in MODELS
    ]
    gpus = [{"name": g.name, "memory_bytes": g.memory_bytes, "source": g.source} for g in GPUS]
    return json.dumps(
        {
            "models": models,
            "gpus": gpus,
            "dtype_bits": DTYPE_BITS,
            "gpu_memory_utilization": VLLM.gpu_memory_utilization,
        },
        indent=1,
    )
