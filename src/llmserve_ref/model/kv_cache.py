"""The KV cache: keep every layer's keys and values so each new token costs one step.

During decoding, token t attends to the keys and values of tokens 0..t. They do
not change once computed (a causal model never looks ahead), so we compute each
token's K and V once, store them, and feed the model only the new token. That
store is the KV cache. Its size is the whole story of serving memory:

    bytes = 2 (K and V) × layers × batch × kv_heads × max_len × head_dim × dtype bytes

Here it is preallocated for `max_len` positions, one K and one V tensor per layer
of shape ``[batch, num_kv_heads, max_len, head_dim]``, plus `length`, how many
positions hold real data. A forward pass over T new tokens writes positions
``length .. length+T-1`` in every layer (`update`), then moves `length` on by T
(`advance`). `truncate` moves it back, which is all a rollback needs: positions
past `length` are ignored and overwritten later (speculative decoding rejects
draft tokens this way).

Every row of a batch has the same length: batched prompts must be the same
number of tokens. Ragged batches need padding masks or a paged cache, which
later pages build.

>>> import torch
>>> cache = KVCache(num_layers=2, batch_size=1, num_kv_heads=2, max_len=8, head_dim=4)
>>> k = v = torch.ones(1, 2, 3, 4)
>>> keys, values = cache.update(0, k, v)
>>> keys.shape
torch.Size([1, 2, 3, 4])
>>> cache.advance(3)
>>> cache.length, cache.nbytes
(3, 1024)
>>> cache.truncate(1)
>>> cache.length
1
"""

from __future__ import annotations

import torch

from llmserve_ref.kernels.grouped_attention import grouped_attention


# --8<-- [start:kv_elements]
def kv_elements(num_kv_heads: int, head_dim: int) -> int:
    """Elements one layer caches for one token: a key and a value vector per KV head.

    The one home of that formula: `KVCache`, the engine's paged KV storage and
    `llmserve_ref.planning.kv_math` all count with it.

    >>> kv_elements(num_kv_heads=8, head_dim=128)  # Llama-3.1-8B
    2048
    """
    return 2 * num_kv_heads * head_dim


# --8<-- [end:kv_elements]


# --8<-- [start:kv_cache]
class KVCache:
    """Preallocated per-layer keys and values, and how many positions are filled."""

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_kv_heads: int,
        max_len: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (batch_size, num_kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(num_layers)]
        self.max_len = max_len
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by all the K and V tensors, filled or not."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store new `k`, `v` (``[batch, kv_heads, T, head_dim]``) after the filled positions.

        Returns the keys and values of all positions so far, new ones included,
        which is what attention in this layer needs. Call `advance` once every
        layer has been updated.
        """
        start, end = self.length, self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"KV cache overflow: {end} positions needed but max_len is {self.max_len}; "
                f"allocate a larger cache"
            )
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def positions(self, num_tokens: int) -> torch.Tensor:
        """The positions of `num_tokens` new tokens: they continue where the cache ends."""
        device = self.keys[0].device
        return torch.arange(self.length, self.length + num_tokens, device=device)

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Store `k`, `v` and attend `q` over every position so far (what `Llama` calls).

        Once the last layer has stored its keys, the new positions count as filled.
        """
        keys, values = self.update(layer, k, v)  # now all S = length + T positions
        if layer == len(self.keys) - 1:
            self.advance(k.shape[2])
        return grouped_attention(q, keys, values, positions)

    def advance(self, num_tokens: int) -> None:
        """Mark `num_tokens` more positions as filled (after a forward pass)."""
        self.length += num_tokens

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on; they will be overwritten."""
        if not 0 <= length <= self.length:
            raise ValueError(
                f"cannot truncate to {length}: the cache holds {self.length} positions "
                f"and the new length must be between 0 and that"
            )
        self.length = length


# --8<-- [end:kv_cache]
