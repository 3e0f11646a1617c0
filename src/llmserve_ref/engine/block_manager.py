"""The paged KV allocator: block ids, reference counts, block tables, and a prefix cache.

The KV cache is cut into `num_blocks` blocks of `block_size` tokens
(PagedAttention, Kwon et al., arXiv:2309.06180). A sequence's *block table* lists
the blocks holding its keys and values, in order; position p of the sequence
lives in slot ``p % block_size`` of block ``table[p // block_size]``. Blocks are
taken one at a time as a sequence grows, so no memory is reserved for tokens
that are never generated, and any free block serves any sequence, so the free
memory never splits into pieces too small to use.

This module only does the bookkeeping, with no tensors, so the same code serves
the real engine (whose KV storage holds the tensors, indexed by these block
ids) and the simulator (which sizes pools for GPUs it never allocates).

* **Reference counts.** A block may sit in several tables: the prompt of an
  ``n > 1`` request, or a prefix cached from an earlier request. A block is free
  when its count drops to zero. A block held by more than one table, or
  registered in the prefix cache, is never written in place: a sequence about
  to write into one gets a private copy first (copy-on-write), and the copy is
  listed in `pending_copies` for the engine to perform before the forward pass.
* **Prefix caching.** A full block that enters the cache gets an entry id that is
  never used again, and a key: the entry id of the block before it, its own
  token ids and, for the first block, a per-tenant salt. Equal keys mean equal
  prefixes, exactly: by induction, the entry before names the whole prefix
  before. The cache finds keys by a hash chained the way vLLM chains it
  (SHA-256 of the parent's hash and the block's tokens, by default), and a hit
  compares the whole key, so no two prefixes can be confused, whatever the
  hash function does (a test passes one that hashes every block to 0).
* **LRU eviction.** A cached block whose count drops to zero keeps its
  contents and stays findable; free blocks form one queue, empty ones in
  front (taken first) and cached ones behind in the order they were freed
  (evicted least-recently-used, and only when a free block is needed).

>>> bm = BlockManager(num_blocks=4, block_size=4)
>>> bm.allocate("a", token_ids=[1, 2, 3, 4, 5, 6], num_tokens=6)  # no cached prefix yet
0
>>> bm.table("a"), bm.num_free_blocks
([0, 1], 2)
>>> bm.cache_full_blocks("a", [1, 2, 3, 4, 5, 6], num_computed_tokens=6)  # block 0 is full
>>> bm.free("a")
>>> bm.allocate("b", token_ids=[1, 2, 3, 4, 9], num_tokens=5)  # same first 4 tokens
4
>>> bm.table("b")  # block 0 reused; block 1 was empty and is taken first
[0, 1]
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence

from llmserve_ref.engine.kv_block import (
    Block,
    BlockHash,
    BlockKey,
    HashFunction,
    blocks_for,
    full_blocks,
    sha256_block_hash,
)


class BlockError(ValueError):
    """Bad use of the allocator: it refused and changed nothing."""


class BlockManager:
    """Block tables over a pool of reference-counted blocks, with a prefix cache."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        max_blocks_per_table: int | None = None,
        hash_function: HashFunction = sha256_block_hash,
    ) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1: {num_blocks}, {block_size}")
        self.block_size = block_size
        # The width of a block table: a sequence of the model's maximum length.
        self.max_blocks_per_table = max_blocks_per_table or num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.hash_function = hash_function
        self.blocks = [Block(i) for i in range(num_blocks)]
        # Blocks with ref_count 0, in the order they will be taken: empty ones first.
        self.free_queue: OrderedDict[int, Block] = OrderedDict((b.block_id, b) for b in self.blocks)
        self.cached: dict[BlockHash, list[Block]] = {}  # hash -> the blocks cached under it
        self._entries = itertools.count()  # cache entry ids: each used once
        self.tables: dict[str, list[Block]] = {}
        # Per table, (hash, cache entry) of the prefix up to each of its full blocks.
        self.prefixes: dict[str, list[tuple[BlockHash, int]]] = {}
        self.pending_copies: list[tuple[int, int]] = []  # (source, destination) block ids
        self._copy_sources: list[Block] = []  # held until the copies are done
        self.num_queries = 0  # prompt tokens looked up in the prefix cache (vLLM counts tokens)
        self.num_hits = 0  # ... and found there

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now: empty, or cached but held by no table."""
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks whose contents the prefix cache can hand out again."""
        return sum(map(len, self.cached.values()))

    def table(self, seq_id: str) -> list[int]:
        """The block ids of `seq_id`'s table, in order."""
        return [b.block_id for b in self._table(seq_id)]

    def _check_width(self, seq_id: str, num_tokens: int) -> None:
        needed = blocks_for(num_tokens, self.block_size)
        if needed > self.max_blocks_per_table:
            raise BlockError(
                f"sequence {seq_id!r} would need {needed} blocks for "
                f"{num_tokens} tokens, past its table's capacity of {self.max_blocks_per_table} "
                f"({self.max_blocks_per_table * self.block_size} tokens); stop it before that"
            )

    def _table(self, seq_id: str) -> list[Block]:
        try:
            return self.tables[seq_id]
        except KeyError:
            raise BlockError(
                f"sequence {seq_id!r} holds no blocks: it was freed already, or never allocated"
            ) from None

    # --8<-- [start:pool]
    def _take(self) -> Block:
        """A free block for new contents: the front of the queue, evicted from the cache."""
        _, block = self.free_queue.popitem(last=False)
        if block.key is not None:  # the least recently used cached block: forget it
            self._uncache(block)
        block.ref_count = 1
        return block

    def _hold(self, block: Block) -> None:
        """One more table holds `block`; a cached block with no holder leaves the free queue."""
        if block.ref_count == 0:
            del self.free_queue[block.block_id]
        block.ref_count += 1

    def _release(self, block: Block) -> None:
        """One table lets go of `block`; at zero it is free (cached ones stay findable)."""
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free_queue[block.block_id] = block  # at the back: evicted last
            if block.key is None:
                self.free_queue.move_to_end(block.block_id, last=False)  # empty: taken first

    # --8<-- [end:pool]

    # --8<-- [start:prefix]
    def _find(self, block_hash: BlockHash, key: BlockKey) -> Block | None:
        """The cached block whose key is `key`: the hash only says where to look."""
        return next((b for b in self.cached.get(block_hash, ()) if b.key == key), None)

    def cached_prefix(self, token_ids: Sequence[int], salt: str | None = None) -> list[Block]:
        """The longest run of leading full blocks of `token_ids` found in the cache.

        Block i is a hit only if its key is (the entry of hit i - 1, its tokens, the
        salt if i is 0): the whole prefix up to its end, salt included, is the request's.
        """
        hits: list[Block] = []
        if not self.enable_prefix_caching:
            return hits
        parent_hash, parent_entry = None, None
        for i, tokens in enumerate(full_blocks(token_ids, self.block_size)):
            block_salt = salt if i == 0 else None
            block_hash = self.hash_function(parent_hash, tokens, block_salt)
            block = self._find(block_hash, (parent_entry, tokens, block_salt))
            if block is None:
                break
            hits.append(block)
            parent_hash, parent_entry = block_hash, block.entry
        return hits

    # --8<-- [end:prefix]

    def _plan(
        self, num_tokens: int, token_ids: Sequence[int] | None, salt: str | None, capacity: int
    ) -> tuple[list[Block], int]:
        """The cached blocks a new table would start with, and the free blocks it would take."""
        hits = [] if token_ids is None else self.cached_prefix(token_ids[:num_tokens], salt)
        idle_hits = sum(b.ref_count == 0 for b in hits)  # cached, but in the free queue
        copy = int(len(hits) * self.block_size >= num_tokens)  # see allocate
        return hits, blocks_for(capacity, self.block_size) - len(hits) + idle_hits + copy

    def blocks_needed(
        self,
        num_tokens: int,
        token_ids: Sequence[int] | None = None,
        salt: str | None = None,
        capacity: int | None = None,
    ) -> int:
        """Free blocks `allocate` would take (same arguments)."""
        # equivalent mutants: num_tokens >= 1 (allocate's contract), so `or 0` and `or 1` agree
        capacity = max(num_tokens, capacity or 0)  # pragma: no mutate
        return self._plan(num_tokens, token_ids, salt, capacity)[1]

    def allocate(
        self,
        seq_id: str,
        num_tokens: int,
        token_ids: Sequence[int] | None = None,
        salt: str | None = None,
        capacity: int | None = None,
    ) -> int:
        """Give `seq_id` a table for `num_tokens` tokens; return how many are cached already.

        `token_ids` (at least `num_tokens` of them) let leading full blocks be
        found in the prefix cache and shared instead of recomputed. At least one
        token is always left to compute (a forward pass needs an input to produce
        the next logits), so a prompt found whole in the cache recomputes its
        last token, in a private copy of its last block. `capacity` reserves
        blocks for that many tokens up front (default: `num_tokens`).
        """
        if seq_id in self.tables:
            raise BlockError(f"sequence {seq_id!r} already has a block table; free it first")
        if num_tokens < 1:
            raise BlockError(f"a sequence needs at least one token, got {num_tokens}")
        capacity = max(num_tokens, capacity or 0)
        self._check_width(seq_id, capacity)
        hits, needed = self._plan(num_tokens, token_ids, salt, capacity)
        if needed > self.num_free_blocks:
            raise BlockError(
                f"sequence {seq_id!r} needs {needed} free blocks, {self.num_free_blocks} are "
                "free; check blocks_needed() first, or free (preempt) another sequence"
            )
        for block in hits:
            self._hold(block)
        table = hits + [
            self._take() for _ in range(blocks_for(capacity, self.block_size) - len(hits))
        ]
        self.tables[seq_id] = table
        self.prefixes[seq_id] = [b.prefix() for b in hits]
        num_cached = min(len(hits) * self.block_size, num_tokens - 1)
        if token_ids is not None and self.enable_prefix_caching:
            self.num_queries += num_tokens
            self.num_hits += num_cached
        self._make_writable(
            table, num_cached // self.block_size, blocks_for(num_tokens, self.block_size)
        )
        return num_cached

    def slots_needed(self, seq_id: str, num_computed_tokens: int, num_tokens: int) -> int:
        """Free blocks `append_slots` would take to write positions up to `num_tokens` - 1."""
        table = self._table(seq_id)
        new = max(0, blocks_for(num_tokens, self.block_size) - len(table))
        first = num_computed_tokens // self.block_size
        copies = sum(
            self._shared(b) for b in table[first : blocks_for(num_tokens, self.block_size)]
        )
        return new + copies

    def append_slots(self, seq_id: str, num_computed_tokens: int, num_tokens: int) -> bool:
        """Make positions ``num_computed_tokens .. num_tokens - 1`` of `seq_id` writable.

        Adds blocks at the end of its table as needed, and copies any shared or
        cached block those positions fall in. Returns False, changing nothing,
        if there are not enough free blocks (the caller preempts someone).
        """
        if num_computed_tokens > num_tokens:
            raise BlockError(f"num_computed_tokens {num_computed_tokens} > num_tokens {num_tokens}")
        self._check_width(seq_id, num_tokens)
        if self.slots_needed(seq_id, num_computed_tokens, num_tokens) > self.num_free_blocks:
            return False
        table = self.tables[seq_id]
        table.extend(
            self._take() for _ in range(blocks_for(num_tokens, self.block_size) - len(table))
        )
        first, end = num_computed_tokens // self.block_size, blocks_for(num_tokens, self.block_size)
        self._make_writable(table, first, end)
        return True

    def _shared(self, block: Block) -> bool:
        """Writing into `block` would change what another table or the cache sees."""
        return block.ref_count > 1 or block.key is not None

    def _make_writable(self, table: list[Block], first: int, end: int) -> None:
        """Copy-on-write: swap each shared block of ``table[first:end]`` for a private copy.

        Only the blocks about to be written: room reserved beyond them is copied (or
        not) when it is written, and `slots_needed` counted exactly these.
        """
        for i in range(first, end):
            source = table[i]
            if not self._shared(source):
                continue
            table[i] = self._take()
            self.pending_copies.append((source.block_id, table[i].block_id))
            self._copy_sources.append(source)  # still held: nobody may reuse it before the copy

    def copies_done(self) -> None:
        """The engine has copied `pending_copies`: let go of the sources."""
        for source in self._copy_sources:
            self._release(source)
        self.pending_copies.clear()
        self._copy_sources.clear()

    def cache_full_blocks(
        self,
        seq_id: str,
        token_ids: Sequence[int],
        num_computed_tokens: int,
        salt: str | None = None,
    ) -> None:
        """Enter `seq_id`'s newly full blocks (their keys and values computed) in the cache.

        `token_ids` are the sequence's tokens, at least its first `num_computed_tokens`.
        A block whose prefix is cached already (another sequence computed the same
        prefix at the same time) is left out of the cache; it is freed as usual, and
        the blocks after it are keyed under the cached one.
        """
        if not self.enable_prefix_caching:
            return
        table, prefix = self._table(seq_id), self.prefixes[seq_id]
        if len(token_ids) < num_computed_tokens:
            raise BlockError(
                f"sequence {seq_id!r}: {num_computed_tokens} tokens computed but only "
                f"{len(token_ids)} token ids given; pass all of its tokens"
            )
        full = min(num_computed_tokens // self.block_size, len(table))
        if full <= len(prefix):
            return
        parent_hash, parent_entry = prefix[-1] if prefix else (None, None)
        blocks = full_blocks(token_ids[: full * self.block_size], self.block_size, len(prefix))
        pairs = zip(table[len(prefix) : full], blocks, strict=True)
        for i, (block, tokens) in enumerate(pairs, start=len(prefix)):
            block_salt = salt if i == 0 else None
            block_hash = self.hash_function(parent_hash, tokens, block_salt)
            key = (parent_entry, tokens, block_salt)
            cached = self._find(block_hash, key)
            if cached is None and block.key is None:
                cached = self._cache(block, block_hash, key)
            # A block left out of the cache gets an entry nobody can match.
            parent_hash = block_hash
            parent_entry = next(self._entries) if cached is None else cached.prefix()[1]
            prefix.append((parent_hash, parent_entry))

    def _cache(self, block: Block, block_hash: BlockHash, key: BlockKey) -> Block:
        block.key, block.block_hash, block.entry = key, block_hash, next(self._entries)
        self.cached.setdefault(block_hash, []).append(block)
        return block

    def _uncache(self, block: Block) -> None:
        bucket = self.cached[block.block_hash]
        bucket.remove(block)
        if not bucket:
            del self.cached[block.block_hash]
        block.key = block.block_hash = block.entry = None

    def fork(self, parent_id: str, child_id: str) -> None:
        """Give `child_id` the same blocks as `parent_id` (the ``n`` samples of one prompt)."""
        if child_id in self.tables:
            raise BlockError(f"sequence {child_id!r} already has a block table; free it first")
        table = self._table(parent_id)
        for block in table:
            self._hold(block)
        self.tables[child_id] = list(table)
        self.prefixes[child_id] = list(self.prefixes[parent_id])

    def free(self, seq_id: str) -> None:
        """Let go of every block of `seq_id`'s table, the last block first.

        Freed in reverse, the blocks at the end of a sequence are evicted before
        its beginning, which is the part other requests are likeliest to share.
        """
        self.truncate(seq_id, 0)
        del self.tables[seq_id], self.prefixes[seq_id]

    def truncate(self, seq_id: str, num_tokens: int) -> None:
        """Let go of `seq_id`'s blocks past its first `num_tokens` tokens, the last first
        (speculative decoding's rollback: a block that held only rejected guesses goes back)."""
        table = self._table(seq_id)
        keep = blocks_for(num_tokens, self.block_size)
        self._cancel_copies(table[keep:])
        for block in reversed(table[keep:]):
            self._release(block)
        del table[keep:]

    def _cancel_copies(self, table: list[Block]) -> None:
        """Drop the pending copies into blocks of a table being freed: once free, a
        destination may go to another sequence before the engine runs the copies."""
        freed = {b.block_id for b in table}
        keep = [i for i, (_, dst) in enumerate(self.pending_copies) if dst not in freed]
        for i in set(range(len(self.pending_copies))) - set(keep):
            self._release(self._copy_sources[i])
        self.pending_copies = [self.pending_copies[i] for i in keep]
        self._copy_sources = [self._copy_sources[i] for i in keep]
