"""One block of KV memory, how many a sequence needs, and its name in the prefix cache.

The paged allocator (`llmserve_ref.engine.block_manager`) hands out `Block` objects; a
block holds `block_size` tokens' keys and values, so a sequence of n tokens needs
`blocks_for(n, block_size)` of them. A full block can enter the prefix cache under a
key (the cache entry of the block before it, its token ids, the salt) and a hash of
that key chained from the first block, the way vLLM chains it (`sha256_block_hash`).

>>> blocks_for(33, block_size=16)
3
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

# A block's prefix-cache key: the cache entry of the block before it (None for the first
# block), its token ids, and the salt (first block only).
BlockKey = tuple[int | None, tuple[int, ...], str | None]
# What the cache is indexed by: a hash of the parent's hash, the tokens and the salt.
BlockHash = Hashable
HashFunction = Callable[[BlockHash | None, tuple[int, ...], str | None], BlockHash]


@dataclass(eq=False, slots=True)
class Block:
    """One block of KV memory: who holds it, and which prefix it caches (if any)."""

    block_id: int
    ref_count: int = 0
    # Set while the block is full and in the prefix cache:
    key: BlockKey | None = None
    block_hash: BlockHash | None = None
    entry: int | None = None  # its cache entry's id, never reused after it is evicted

    def prefix(self) -> tuple[BlockHash, int]:
        """Its hash and cache entry, which name the prefix up to it (it must be cached)."""
        assert self.entry is not None, f"block {self.block_id} is not in the prefix cache"
        return self.block_hash, self.entry


# --8<-- [start:hash]
def sha256_block_hash(
    parent: BlockHash | None, token_ids: tuple[int, ...], salt: str | None
) -> bytes:
    """A block's hash as vLLM 0.32 computes it by default (`--prefix-caching-hash-algo
    sha256`, `hash_block_tokens` in vllm/v1/core/kv_cache_utils.py): SHA-256 over the
    parent block's hash, the block's token ids and its extra keys, here the salt.

    vLLM serializes the three with pickle; any unambiguous encoding will do. The first
    block's parent is `NONE_HASH`, derived like vLLM's from a fixed seed that
    ``PYTHONHASHSEED`` overrides, so every process hashes the same prefix alike.

    >>> h = sha256_block_hash(None, (1, 2, 3, 4), None)
    >>> len(h), h == sha256_block_hash(None, (1, 2, 3, 4), None)
    (32, True)
    >>> h == sha256_block_hash(None, (1, 2, 3, 4), "tenant-a")  # the salt is hashed in
    False
    """
    digest = hashlib.sha256(parent if isinstance(parent, bytes) else NONE_HASH)
    digest.update(b"%d:" % len(token_ids))
    digest.update(b",".join(b"%d" % t for t in token_ids))
    digest.update(b"\x00" if salt is None else b"\x01" + salt.encode())
    return digest.digest()


NONE_HASH = hashlib.sha256(os.environ.get("PYTHONHASHSEED", "llmserve-none-hash").encode()).digest()
# --8<-- [end:hash]


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens (the last one may be partly empty)."""
    return -(-num_tokens // block_size)


def full_blocks(token_ids: Sequence[int], block_size: int, first: int = 0) -> list[tuple[int, ...]]:
    """The token ids of each full block of `token_ids`, from block `first` on."""
    return [
        tuple(token_ids[i * block_size : (i + 1) * block_size])
        for i in range(first, len(token_ids) // block_size)
    ]
