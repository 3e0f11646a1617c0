"""The allocator's invariant check catches each way the bookkeeping can disagree."""

from __future__ import annotations

import pytest

from llmserve_ref.engine.block_invariants import check_blocks
from llmserve_ref.engine.block_manager import BlockManager


def allocator() -> BlockManager:
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.allocate("a", num_tokens=9, token_ids=list(range(9)))
    bm.cache_full_blocks("a", list(range(9)), num_computed_tokens=9)
    check_blocks(bm)  # a consistent allocator passes
    return bm


def test_a_count_no_table_accounts_for_is_caught():
    bm = allocator()
    bm.blocks[bm.table("a")[0]].ref_count += 1
    with pytest.raises(AssertionError):
        check_blocks(bm)


def test_a_held_block_in_the_free_queue_is_caught():
    bm = allocator()
    held = bm.blocks[bm.table("a")[1]]
    bm.free_queue[held.block_id] = held
    with pytest.raises(AssertionError):
        check_blocks(bm)


def test_a_cached_block_filed_twice_is_caught():
    bm = allocator()
    bucket = next(iter(bm.cached.values()))
    bucket.append(bucket[0])
    with pytest.raises(AssertionError):
        check_blocks(bm)
