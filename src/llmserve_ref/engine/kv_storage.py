"""The KV storage: the tensors a paged KV cache lives in, indexed by block id.

One tensor holds every layer's keys and values,

    [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]

so that ``storage.keys(layer)[block_id]`` is one block of one layer's keys. The
block manager (`llmserve_ref.engine.block_manager`) decides which block ids a
sequence holds and never sees a tensor; this class holds the bytes and never
decides anything. A token's keys and values go to its *slot*,
``block_id * block_size + position % block_size``, through a slot mapping the
model runner computes each step.

How many blocks fit in a memory budget is the KV size math of
`llmserve_ref.planning.kv_math` for this model: a block holds `block_size`
tokens of ``layers × kv_elements(kv_heads, head_dim) × bytes`` each.

>>> import torch
>>> from llmserve_ref.model.llama_config import ModelConfig
>>> config = ModelConfig(num_hidden_layers=2, num_key_value_heads=2, hidden_size=64,
...                      num_attention_heads=4)  # head_dim 16
>>> config.kv_bytes_per_token(torch.float32)  # 2 layers x (2 x 2 heads x 16) x 4 bytes
512
>>> num_blocks_for(1 << 20, config, block_size=16)  # 1 MiB: 8 KiB per block of 16 tokens
128
>>> kv = KVStorage.for_model(config, num_blocks=4, block_size=16)
>>> kv.keys(layer=0).shape, kv.nbytes
(torch.Size([4, 16, 2, 16]), 32768)
"""

from __future__ import annotations

import torch

from llmserve_ref.model.llama_config import ModelConfig


def num_blocks_for(
    memory_bytes: int,
    config: ModelConfig,
    block_size: int,
    dtype: torch.dtype = torch.float32,
    draft: ModelConfig | None = None,
) -> int:
    """Blocks of `block_size` tokens that fit in `memory_bytes` of KV memory (a block
    holds a draft model's KV too, when one guesses beside the model)."""
    block_bytes = block_size * sum(c.kv_bytes_per_token(dtype) for c in (config, draft) if c)
    if memory_bytes < block_bytes:
        raise ValueError(
            f"{memory_bytes} bytes of KV memory hold no block: one block of {block_size} tokens "
            f"takes {block_bytes} bytes for this model; give the cache more memory"
        )
    return memory_bytes // block_bytes


class KVStorage:
    """Every layer's keys and values, in blocks, written through slot mappings."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim)
        self.data = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size

    @classmethod
    def for_model(
        cls,
        config: ModelConfig,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> KVStorage:
        c = config
        return cls(
            c.num_hidden_layers,
            num_blocks,
            block_size,
            c.num_key_value_heads,
            c.head_dim,
            dtype,
            device,
        )

    @property
    def num_blocks(self) -> int:
        return self.data.shape[2]

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def keys(self, layer: int) -> torch.Tensor:
        """Layer `layer`'s keys: ``[num_blocks, block_size, kv_heads, head_dim]``."""
        return self.data[layer, 0]

    def values(self, layer: int) -> torch.Tensor:
        return self.data[layer, 1]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store `k`, `v` (``[num_tokens, kv_heads, head_dim]``) at `slots` (``[num_tokens]``)."""
        if torch.compiler.is_compiling():
            # In a compiled graph (llmserve_ref.engine.compiled_decode), a write through a
            # view of the storage became a copy of the whole storage at every layer; into
            # the storage itself, indexed on every dimension, inductor writes in place.
            block, offset = slots // self.block_size, slots % self.block_size
            for kv, new in ((0, k), (1, v)):
                where = (torch.tensor(layer), torch.tensor(kv), block, offset)
                self.data.index_put_(where, new)
            return
        # A block is block_size consecutive slots: view the pool as one long row of slots.
        self.keys(layer).view(-1, *k.shape[1:]).index_copy_(0, slots, k)
        self.values(layer).view(-1, *v.shape[1:]).index_copy_(0, slots, v)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy-on-write: copy every (source, destination) block, in every layer, K and V."""
        if pairs:
            src, dst = zip(*pairs, strict=True)
            self.data[:, :, list(dst)] = self.data[:, :, list(src)]
