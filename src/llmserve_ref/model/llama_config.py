"""The tiny Llama's shape, with the field names of Hugging Face's ``LlamaConfig``.

It reads and writes the ``config.json`` that ``transformers`` reads (`from_hf_dict`,
`to_hf_dict`), and knows the one size every serving page needs: the bytes one token
adds to the KV cache (`kv_bytes_per_token`).

>>> config = ModelConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
>>> config.head_dim, config.kv_bytes_per_token()  # 4 layers x 2 (K, V) x 2 heads x 16 x 4 B
(16, 1024)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch

from llmserve_ref.model.kv_cache import kv_elements


@dataclass
class ModelConfig:
    """Model shape, with the field names of Hugging Face's ``LlamaConfig``."""

    vocab_size: int = 1024
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    max_position_embeddings: int = 1024
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    head_dim: int = 0  # 0: hidden_size // num_attention_heads, as Hugging Face's default
    bos_token_id: int = 0
    eos_token_id: int = 1

    def __post_init__(self) -> None:
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}): each K/V head serves "
                f"a whole group of query heads"
            )

    def to_hf_dict(self, dtype: torch.dtype = torch.float32) -> dict:
        """The ``config.json`` contents ``transformers.LlamaForCausalLM`` expects."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            **asdict(self),
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "torch_dtype": str(dtype).removeprefix("torch."),
            "use_cache": True,
        }

    def kv_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes the KV cache of one sequence grows by per token, over all layers."""
        per_layer = kv_elements(self.num_key_value_heads, self.head_dim)
        return self.num_hidden_layers * per_layer * dtype.itemsize

    @classmethod
    def from_hf_dict(cls, config: dict) -> ModelConfig:
        """Read the fields we use from a ``config.json`` dict; ignore the rest."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in config.items() if k in names})
