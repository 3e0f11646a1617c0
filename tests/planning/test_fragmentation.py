"""Contiguous regions, first fit, and the three kinds of waste the PagedAttention paper names."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from llmserve_ref.engine.block_invariants import check_blocks
from llmserve_ref.engine.block_manager import BlockError, BlockManager
from llmserve_ref.engine.request import Request
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.fragmentation import ContiguousAllocator, allocator, waste
from llmserve_ref.planning.workload import LogNormal, sample_workload


def test_regions_are_contiguous_and_first_fit():
    pool = ContiguousAllocator(num_blocks=10, block_size=4)
    pool.allocate("a", 8, capacity=12)  # 3 blocks
    pool.allocate("b", 4)  # 1 block
    pool.allocate("c", 16)  # 4 blocks
    assert [pool.table(s) for s in "abc"] == [[0, 1, 2], [3], [4, 5, 6, 7]]
    pool.free("a")
    assert pool.blocks_needed(8) == 2  # fits in a's old run: blocks 0, 1
    pool.allocate("d", 8)
    assert pool.table("d") == [0, 1]
    check_blocks(pool)
    # 3 blocks are free (2, 8, 9) but no run of 3: external fragmentation.
    assert pool.num_free_blocks == 3 and pool.blocks_needed(12) > pool.num_blocks
    assert pool.fragmented
    assert pool.blocks_needed(16) > pool.num_blocks and not pool.fragmented  # not enough at all
    with pytest.raises(BlockError):
        pool.allocate("e", 12)
    with pytest.raises(BlockError, match="never grows"):
        pool.append_slots("b", 4, 5)


def test_the_allocator_follows_the_reservation():
    paged = allocator(SchedulerConfig(num_blocks=8))
    assert type(paged) is BlockManager and paged.enable_prefix_caching
    assert isinstance(
        allocator(SchedulerConfig(num_blocks=8, reservation="max_tokens")), ContiguousAllocator
    )


def test_reservation_config_is_checked():
    with pytest.raises(ValueError, match="reservation is"):
        SchedulerConfig(reservation="buddy")
    with pytest.raises(ValueError, match="max_model_len"):
        SchedulerConfig(reservation="context")
    with pytest.raises(ValueError, match="max_model_len"):
        SchedulerConfig(num_blocks=4, block_size=4, reservation="context", max_model_len=17)
    config = SchedulerConfig(num_blocks=8, block_size=4, reservation="context", max_model_len=16)
    with pytest.raises(ValueError, match="past max_model_len"):
        config.check_fits("r", 10, 7)


@pytest.mark.parametrize(
    ("reservation", "held"), [("paged", 3), ("max_tokens", 7), ("context", 10)]
)
def test_a_reservation_holds_its_region_from_admission(reservation, held):
    config = SchedulerConfig(
        token_budget=16,
        max_num_seqs=4,
        block_size=4,
        num_blocks=12,
        reservation=reservation,
        max_model_len=40,
    )
    scheduler = Scheduler(config, block_manager=allocator(config))
    request = Request("r", prompt_len=10, max_tokens=18)  # 28 tokens: 7 blocks
    scheduler.add_request(request)
    scheduler.update_from_output(scheduler.schedule())
    assert len(scheduler.block_table(request)) == held
    assert request.reserved == (reservation != "paged")


def test_the_waste_adds_up_to_the_pool_and_ranks_the_policies():
    requests = sample_workload(
        120, math.inf, LogNormal(64, 1.0, high=400), LogNormal(48, 1.0, high=200), seed=0
    )
    requests = [replace(r, max_tokens=256) for r in requests]
    shares = {}
    for reservation in ("context", "max_tokens", "paged"):
        config = SchedulerConfig(
            token_budget=1024,
            max_num_seqs=64,
            block_size=8,
            num_blocks=400,
            reservation=reservation,
            max_model_len=1024,
        )
        w = waste(requests, config)
        total = w.used + w.reserved + w.internal + w.external + w.free
        assert total % (config.num_blocks * config.block_size) == 0
        shares[reservation] = w
    paged = shares["paged"]
    assert paged.external == 0 and paged.internal < 8 * paged.seq_steps  # within the last block
    assert shares["context"].external == 0  # equal regions: any freed one fits the next
    assert shares["max_tokens"].external > 0  # regions of every size leave gaps
    used = [shares[r].share("used") for r in ("context", "max_tokens", "paged")]
    assert used == sorted(used) and used[2] > 0.9
