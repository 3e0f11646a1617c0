"""Many requests on one system prompt: the memory a shared prefix saves, and what it does not.

With prefix caching, requests that start with the same tokens hold the same blocks for
them: the block manager counts the holders of each block and frees it when the last one
lets go. So N concurrent requests on one system prompt hold one copy of its full blocks,
not N, and more of them fit in the same pool. What sharing does not change is the
attention: every sequence still attends to the whole prefix with its own queries, so a
decode step reads the shared blocks once per sequence (`kv_tokens_read`, as the scheduler
counts it for the step-time model). Kernels that read a shared prefix once for a whole
batch exist (cascade attention, Hydragen); this package's attention does not.

>>> alone, shared = (share_one_prompt(8, 1000, 50, caching=c) for c in (False, True))
>>> alone.blocks_used, shared.blocks_used  # 8 x 66 blocks; 62 shared + 8 x 4 own
(528, 94)
>>> alone.kv_tokens_read == shared.kv_tokens_read  # the same reads, step for step
True
"""

from __future__ import annotations

from dataclasses import dataclass

from llmserve_ref.engine.block_manager import BlockManager
from llmserve_ref.engine.request import Request
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig


# --8<-- [start:share]
def _prompt(prefix_len: int, own_len: int, i: int) -> list[int]:
    """Request i's tokens: the shared prefix (0, 1, 2, ...), then ids no other request has."""
    return list(range(prefix_len)) + [prefix_len + i * own_len + t for t in range(own_len)]


@dataclass(frozen=True)
class Shared:
    """N requests on one prefix, at the first step where all of them decode."""

    blocks_used: int  # blocks the N requests hold
    kv_tokens_read: int  # cached tokens the step's attention reads
    prefill_tokens: int  # prompt tokens computed to admit them


def share_one_prompt(
    n: int, prefix_len: int, own_len: int, block_size: int = 16, caching: bool = True
) -> Shared:
    """Run one request on the prefix, then `n` at once, each the prefix and `own_len`
    tokens of its own, through the scheduler; measure when all `n` decode."""
    config = SchedulerConfig(
        num_blocks=2 * (n + 1) * (prefix_len + own_len) // block_size + 64,
        block_size=block_size,
        max_num_seqs=n,
        token_budget=max(2048, n * (prefix_len + own_len)),  # every prompt in one step
        enable_prefix_caching=caching,
    )
    scheduler = Scheduler(config)
    prompts = [_prompt(prefix_len, own_len, i) for i in range(n + 1)]
    first, *rest = [Request(str(i), len(p), 4, token_ids=p) for i, p in enumerate(prompts)]
    _until_decoding(scheduler, [first])
    scheduler.finish(first)  # done; with caching, its prefix blocks stay findable
    prefill = _until_decoding(scheduler, rest)
    out = scheduler.schedule()  # a step of n decode tokens
    return Shared(scheduler.block_manager.num_used_blocks, out.kv_tokens_read, prefill)


def _until_decoding(scheduler: Scheduler, requests: list[Request]) -> int:
    """Add `requests` and step until all of them decode; return the tokens computed."""
    for request in requests:
        scheduler.add_request(request)
    computed = 0
    while not all(r.is_decoding for r in requests):
        out = scheduler.schedule()
        computed += out.total_num_scheduled_tokens
        scheduler.update_from_output(out, dict.fromkeys(out.num_scheduled_tokens, 0))
    return computed


def sharing_sequences_that_fit(
    num_blocks: int, prefix_len: int, own_len: int, block_size: int = 16, caching: bool = True
) -> int:
    """How many sequences of the prefix and `own_len` tokens of their own (prompt and
    answer) a pool of `num_blocks` holds at once, allocated one after another."""
    blocks = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
    length, count = prefix_len + own_len, 0
    while True:
        tokens = _prompt(prefix_len, own_len, count)
        if blocks.blocks_needed(length, tokens) > blocks.num_free_blocks:
            return count
        blocks.allocate(str(count), length, tokens)
        blocks.cache_full_blocks(str(count), tokens, num_computed_tokens=length)
        count += 1


# --8<-- [end:share]
