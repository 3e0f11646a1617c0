"""What must hold of the paged allocator after every operation, checked.

A `BlockManager` keeps the same facts in several places: each block's reference count,
the tables that hold it, the free queue, the prefix cache's buckets. They must agree
after every operation, or a block is freed while a table still reads it (or leaks). The
tests call `check_blocks` after every step of their workloads; the allocator lab runs
its own allocator and this one through the same workload, each with its own check.

>>> from llmserve_ref.engine.block_manager import BlockManager
>>> bm = BlockManager(num_blocks=4, block_size=4)
>>> _ = bm.allocate("a", num_tokens=6)
>>> check_blocks(bm)  # silent: everything agrees
>>> bm.blocks[0].ref_count += 1  # a count no table accounts for
>>> check_blocks(bm)
Traceback (most recent call last):
...
AssertionError: Block(block_id=0, ref_count=2, ...
"""

from __future__ import annotations

from llmserve_ref.engine.block_manager import BlockManager


def check_blocks(bm: BlockManager) -> None:
    """Assert the allocator's invariants (the tests call it after every operation): every
    block's count is the number of tables (and pending copies) holding it, a block is in the
    free queue exactly when nobody holds it, and every cached block sits once under its hash."""
    holders: dict[int, int] = {}
    for table in bm.tables.values():
        for block in table:
            holders[block.block_id] = holders.get(block.block_id, 0) + 1
    for source in bm._copy_sources:
        holders[source.block_id] = holders.get(source.block_id, 0) + 1
    for block in bm.blocks:
        assert block.ref_count == holders.get(block.block_id, 0), block
        assert (block.ref_count == 0) == (block.block_id in bm.free_queue), block
    keys, entries = set(), set()
    for block_hash, bucket in bm.cached.items():
        assert bucket, block_hash
        for block in bucket:
            assert block.key is not None and block.block_hash == block_hash, block
            assert block.key not in keys and block.entry not in entries, block
            keys.add(block.key)
            entries.add(block.entry)
    assert sum(b.key is not None for b in bm.blocks) == bm.num_cached_blocks
