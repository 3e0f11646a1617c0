"""A model's attention shape, as far as its KV cache is concerned, read from its config.json.

The KV size math (`llmserve_ref.planning.kv_math`) needs only a few numbers of a model:
its layers, its query and KV heads and their width, and, for multi-head latent attention
(MLA, DeepSeek-V2), the width of the compressed latent it caches instead. `from_hf_config`
reads them from a Hugging Face ``config.json`` as published, filling what older configs
leave out the way ``transformers`` does; `to_hf_config` writes them back.

>>> shape = from_hf_config({"num_hidden_layers": 32, "num_attention_heads": 32,
...                         "num_key_value_heads": 8, "hidden_size": 4096,
...                         "vocab_size": 128256, "max_position_embeddings": 131072})
>>> shape.attention, shape.head_dim, to_hf_config(shape)["num_key_value_heads"]
('GQA', 128, 8)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of a decoder-only transformer, as far as its KV cache is concerned.

    `head_dim` is the width of one head (for MLA, the paper's d_h = v_head_dim).
    `kv_lora_rank` and `qk_rope_head_dim` are zero except for MLA models.
    """

    name: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "num_attention_heads",
            "num_kv_heads",
            "head_dim",
            "hidden_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            if getattr(self, field) <= 0:
                raise ValueError(
                    f"{self.name}: {field} must be positive, got "
                    f"{getattr(self, field)}; check the config.json"
                )
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.name}: {self.num_kv_heads} KV heads do not divide "
                f"{self.num_attention_heads} attention heads; every KV head must serve the "
                "same number of query heads, so check num_key_value_heads"
            )
        if self.kv_lora_rank < 0 or self.qk_rope_head_dim < 0:
            raise ValueError(f"{self.name}: kv_lora_rank and qk_rope_head_dim must be >= 0")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention(self) -> str:
        """ "MLA", "MHA", "MQA" or "GQA", read off the KV head count."""
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_attention_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    def check_context(self, context_len: int) -> None:
        """Raise ValueError unless a sequence of `context_len` tokens is valid for this model."""
        if context_len < 0:
            raise ValueError(f"context length must be zero or more tokens, got {context_len}")
        if context_len > self.max_position_embeddings:
            raise ValueError(
                f"{self.name} takes at most {self.max_position_embeddings} tokens "
                f"(max_position_embeddings), not {context_len}; use a shorter context"
            )

    def check_tensor_parallel(self, tensor_parallel: int) -> None:
        """Raise ValueError unless the attention splits evenly over `tensor_parallel` GPUs."""
        if tensor_parallel < 1 or self.num_attention_heads % tensor_parallel:
            raise ValueError(
                f"{self.name}: tensor_parallel={tensor_parallel} must be a positive "
                f"divisor of its {self.num_attention_heads} attention heads"
            )
        kv = self.num_kv_heads
        if not self.is_mla and kv % tensor_parallel and tensor_parallel % kv:
            raise ValueError(
                f"{self.name}: tensor_parallel={tensor_parallel} neither divides nor "
                f"is a multiple of its {kv} KV heads; choose one that is"
            )


def from_hf_config(config: Mapping[str, Any], name: str | None = None) -> ModelShape:
    """Read a Hugging Face `config.json` (as a dict) into a `ModelShape`.

    Older configs omit `num_key_value_heads` (MHA: one KV head per query head)
    and most omit `head_dim` (then hidden_size / num_attention_heads). DeepSeek's
    MLA configs carry `kv_lora_rank`, `qk_rope_head_dim` and `v_head_dim`.
    Multimodal configs nest the language model under `text_config`.

    >>> cfg = from_hf_config({"num_hidden_layers": 32, "num_attention_heads": 32,
    ...                       "hidden_size": 4096, "vocab_size": 32000,
    ...                       "max_position_embeddings": 4096}, name="llama-2-7b")
    >>> cfg.attention, cfg.num_kv_heads, cfg.head_dim
    ('MHA', 32, 128)
    """
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), Mapping):
        config = config["text_config"]
    name = name or config.get("_name_or_path") or "model"
    missing = [
        k
        for k in (
            "num_hidden_layers",
            "num_attention_heads",
            "hidden_size",
            "vocab_size",
            "max_position_embeddings",
        )
        if config.get(k) is None
    ]
    if missing:
        raise ValueError(
            f"{name}: config.json has no {', '.join(missing)}; pass the config.json "
            "of a decoder-only transformer (the file next to the weights)"
        )
    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    kv_lora_rank = config.get("kv_lora_rank") or 0
    if kv_lora_rank:
        head_dim = config["v_head_dim"]
    elif config.get("head_dim"):
        head_dim = config["head_dim"]
    elif hidden % heads:
        raise ValueError(
            f"{name}: hidden_size {hidden} is not a multiple of {heads} heads and "
            "config.json has no head_dim; add the model's head_dim to it"
        )
    else:
        head_dim = hidden // heads
    return ModelShape(
        name=name,
        num_layers=config["num_hidden_layers"],
        num_attention_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        hidden_size=hidden,
        vocab_size=config["vocab_size"],
        max_position_embeddings=config["max_position_embeddings"],
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=(config.get("qk_rope_head_dim") or 0) if kv_lora_rank else 0,
    )


def to_hf_config(cfg: ModelShape) -> dict[str, Any]:
    """The `config.json` fields that `from_hf_config` reads back into `cfg`."""
    fields: dict[str, Any] = {
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "hidden_size": cfg.hidden_size,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings,
    }
    if cfg.is_mla:
        fields |= {
            "kv_lora_rank": cfg.kv_lora_rank,
            "qk_rope_head_dim": cfg.qk_rope_head_dim,
            "v_head_dim": cfg.head_dim,
        }
    else:
        fields["head_dim"] = cfg.head_dim
    return fields
