"""A Llama-architecture decoder, small enough to read in one sitting.

The pieces, bottom up, one class each:

* `RMSNorm` scales each vector to unit root-mean-square, then by a learned gain.
* `RotaryEmbedding` encodes position by rotating pairs of query/key features
  by an angle proportional to the position (RoPE), so attention scores depend
  on the distance between tokens.
* `Attention` is causal self-attention with grouped-query attention (GQA):
  ``num_attention_heads`` query heads share ``num_key_value_heads`` K/V heads,
  which shrinks the KV cache by their ratio. One K/V head is MQA; as many as
  query heads is plain multi-head attention.
* `MLP` is SwiGLU: ``down(silu(gate(x)) * up(x))``.
* `DecoderLayer` is pre-norm: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``.
* `Llama` embeds tokens, runs the decoder layers, normalizes and projects to logits.

`Llama.forward` takes only the *new* tokens plus an optional `KVCache`. The
same code path serves prefill (the whole prompt at once) and decode (one token
per step): positions start where the cache ends, and the causal mask lets query
i see keys up to its own position, also when there are more keys than queries.

Parameter names are those of Hugging Face's ``LlamaForCausalLM``
(``model.layers.0.self_attn.q_proj.weight`` ...), and `save_pretrained` writes
``config.json`` + ``model.safetensors`` that ``transformers`` loads as is.

>>> import torch
>>> config = ModelConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
...                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
>>> model = Llama(config)
>>> model(torch.tensor([[1, 2, 3]])).shape
torch.Size([1, 3, 32])
>>> model.make_cache(batch_size=1, max_len=8).nbytes
1024
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from llmserve_ref.device import get_device
from llmserve_ref.kernels.grouped_attention import grouped_attention
from llmserve_ref.model.kv_cache import KVCache
from llmserve_ref.model.llama_config import ModelConfig


# --8<-- [start:rmsnorm]
class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * weight``, computed in float32 as Llama does."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


# --8<-- [end:rmsnorm]


# --8<-- [start:rope]
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Swap the two halves of the last dim and negate the new first half: (a, b) → (-b, a).

    Pairing feature i with feature i + head_dim/2 (not 2i with 2i+1) is the
    Hugging Face Llama convention; using it lets their weights load unchanged.
    """
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RotaryEmbedding(nn.Module):
    """Cosines and sines of ``position × θ^(-2i/d)`` for every position up to a maximum."""

    cos: torch.Tensor  # [max_positions, head_dim], buffers
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # [max_positions, head_dim]
        # Not parameters and not saved: they are a fixed function of the config.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self._last: tuple = (None, None, None)  # (positions, cos, sin) of the last call

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate `x` (``[batch, heads, T, head_dim]``) to its `positions` (``[T]``)."""
        cos, sin = self._angles(positions, x.dtype)
        return x * cos + rotate_half(x) * sin

    def _angles(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple:
        """Cosines and sines at `positions`, looked up once per forward pass: every layer
        rotates queries and keys at the same positions (the same tensor object)."""
        if torch.compiler.is_compiling():  # a compiled graph looks them up itself, no memo
            return self.cos[positions].to(dtype), self.sin[positions].to(dtype)
        last = self._last
        if last[0] is not positions or last[1].dtype != dtype:
            last = (positions, self.cos[positions].to(dtype), self.sin[positions].to(dtype))
            self._last = last  # one assignment: another thread sees the old entry or this one
        return last[1], last[2]


# --8<-- [end:rope]


# --8<-- [start:kv_store]
class KVStore(Protocol):
    """Where a forward pass keeps keys and values: a `KVCache`, or the engine's paged blocks.

    The model asks only two things of it, so that the same model code runs one
    sequence with a contiguous cache and many sequences packed into one batch
    over paged KV (`llmserve_ref.engine.model_runner`).
    """

    def positions(self, num_tokens: int) -> torch.Tensor:
        """The positions of the `num_tokens` new tokens, ``[num_tokens]``."""
        ...

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Store the new `k`, `v` of `layer`; return the attention of `q` over all keys so far."""
        ...


# --8<-- [end:kv_store]


# --8<-- [start:attention]
class Attention(nn.Module):
    """Causal grouped-query self-attention, reading and writing an optional KV cache."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        hidden = config.hidden_size
        q_dim, kv_dim = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(hidden, q_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_dim, bias=False)
        self.o_proj = nn.Linear(q_dim, hidden, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        rope: RotaryEmbedding,
        positions: torch.Tensor,
        cache: KVStore | None,
        layer: int,
    ) -> torch.Tensor:
        batch, T, _ = x.shape
        q, k, v = self.project(x)  # [batch, T, features] each
        q = q.view(batch, T, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, T, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = rope(q, positions), rope(k, positions)
        if cache is None:  # no past: the T tokens attend to each other
            out = grouped_attention(q, k, v, positions)
        else:  # store k, v; attend over every position so far
            out = cache.attend(layer, q, k, v, positions)
        return self.o_proj(out.transpose(1, 2).flatten(2))

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The query, key and value projections of `x`. (A serving engine runs the three as
        one matrix multiply: `llmserve_ref.engine.fused_projections`.)"""
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)


# --8<-- [end:attention]


# --8<-- [start:mlp]
class MLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x)
        return self.down_proj(F.silu(gate) * up)

    def gate_up(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The gate and up projections of `x` (one matrix multiply in an engine, as q, k, v)."""
        return self.gate_proj(x), self.up_proj(x)


# --8<-- [end:mlp]


# --8<-- [start:decoder_layer]
class DecoderLayer(nn.Module):
    """One pre-norm transformer layer: attention then MLP, each with a residual."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self,
        x: torch.Tensor,
        rope: RotaryEmbedding,
        positions: torch.Tensor,
        cache: KVStore | None,
        layer: int,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, positions, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


# --8<-- [end:decoder_layer]


class Llama(nn.Module):
    """The decoder: token ids in, next-token logits out, at every input position."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        # Named like LlamaForCausalLM's `model` submodule, so state_dict keys match.
        self.model = nn.ModuleDict(
            {
                "embed_tokens": nn.Embedding(config.vocab_size, config.hidden_size),
                "layers": nn.ModuleList(
                    DecoderLayer(config) for _ in range(config.num_hidden_layers)
                ),
                "norm": RMSNorm(config.hidden_size, config.rms_norm_eps),
            }
        )
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = cast(nn.Embedding, self.model["embed_tokens"]).weight
        self.rope = RotaryEmbedding(
            config.head_dim, config.max_position_embeddings, config.rope_theta
        )
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """Normal(0, 0.02), Llama's `initializer_range`; norms start at 1."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:  # the weights', which the KV cache takes too
        return self.lm_head.weight.dtype

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        """The decoder layers, in order (Hugging Face's ``model.layers``)."""
        return cast(list[DecoderLayer], list(cast(nn.ModuleList, self.model["layers"])))

    def num_parameters(self) -> int:
        """Distinct parameters (a tied embedding counts once)."""
        return sum(p.numel() for p in self.parameters())

    def make_cache(self, batch_size: int, max_len: int) -> KVCache:
        """An empty KV cache shaped for this model, on its device and in its dtype."""
        c = self.config
        if max_len > c.max_position_embeddings:
            raise ValueError(
                f"a cache of {max_len} positions is longer than the model's "
                f"max_position_embeddings ({c.max_position_embeddings})"
            )
        return KVCache(
            c.num_hidden_layers,
            batch_size,
            c.num_key_value_heads,
            max_len,
            c.head_dim,
            device=self.device,
            dtype=self.dtype,
        )

    # --8<-- [start:forward]
    def forward(self, input_ids: torch.Tensor, cache: KVStore | None = None) -> torch.Tensor:
        """Logits ``[batch, T, vocab]`` for new tokens `input_ids` ``[batch, T]``.

        Without a cache the tokens are positions ``0 .. T-1`` of a fresh sequence.
        With one the cache says where they sit: a `KVCache` continues at its
        `length` and grows by T.
        """
        return self.compute_logits(self.hidden_states(input_ids, cache))

    def hidden_states(self, input_ids: torch.Tensor, cache: KVStore | None = None) -> torch.Tensor:
        """The final normalized hidden states ``[batch, T, hidden]``: `forward` before `lm_head`."""
        T, limit = input_ids.shape[1], self.config.max_position_embeddings
        if cache is not None:
            positions = cache.positions(T)
        elif limit < T:
            raise ValueError(
                f"positions up to {T - 1} requested but max_position_embeddings is {limit}"
            )
        else:
            positions = torch.arange(T, device=input_ids.device)
        x = self.model["embed_tokens"](input_ids)
        for i, block in enumerate(self.decoder_layers):
            x = block(x, self.rope, positions, cache, i)
        return self.model["norm"](x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits from final hidden states (an engine passes only those that sample)."""
        return self.lm_head(hidden)

    # --8<-- [end:forward]

    def save_pretrained(self, directory: str | Path, dtype: torch.dtype | None = None) -> None:
        """Write ``config.json`` and ``model.safetensors`` in Hugging Face's layout.

        `dtype` is how the weights are stored (default: as they are); the
        shipped models use bfloat16, which halves the files.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        dtype = dtype or self.dtype
        state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            del state["lm_head.weight"]  # the same tensor as the embedding
        save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
        text = json.dumps(self.config.to_hf_dict(dtype), indent=2) + "\n"
        (directory / "config.json").write_text(text)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> Llama:
        """Load a directory written by `save_pretrained` (or by ``transformers``).

        Weights are converted to `dtype` (float32 by default, exact for bfloat16
        files) and moved to `device` (default: `get_device()`).
        """
        directory = Path(directory)
        config = ModelConfig.from_hf_dict(json.loads((directory / "config.json").read_text()))
        model = cls(config)
        state = load_file(directory / "model.safetensors")
        if config.tie_word_embeddings:
            state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
        model.load_state_dict(state)
        return model.to(device if device is not None else get_device(), dtype).eval()
