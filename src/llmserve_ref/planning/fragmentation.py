"""KV memory held versus KV memory used: what reserving up front wastes, and what paging keeps.

An engine that gives each request one contiguous KV region must size it when the
request arrives, before anyone knows how long the answer will be. It reserves
either the request's prompt plus its `max_tokens` (as `LoopEngine` does, and
engines with per-request buffers) or the model's whole context length (as
static allocators do). Either way most of the region holds no token for most of
the request's life: the answer is usually far shorter than `max_tokens`, and
even a long one fills its region only at its very end. A paged cache takes a
block when the sequence crosses into it, so a sequence holds at most one
partly filled block.

`occupancy` measures it on a workload: it drives the real scheduler and block
manager (a pool large enough that nothing waits, so every policy sees the same
running set at every step) and at every step adds up the tokens the running
requests hold and what each policy holds for them.

>>> from llmserve_ref.planning.workload import RequestSpec
>>> one = [RequestSpec("a", 0.0, prompt_len=10, output_len=4)]
>>> o = occupancy(one, max_tokens=100, max_model_len=1000, block_sizes=(16,))
>>> o.seq_steps, o.live  # it runs 3 steps after its prefill, holding 10, 11, 12 tokens
(3, 33)
>>> o.reserved["max_tokens"], o.reserved["paged, block 16"]  # 3 x 110, and 3 x one block
(330, 48)

Those reservations are the policies of the systems the PagedAttention paper compared
(Kwon et al., arXiv:2309.06180, Section 3.1), which lose memory three ways: slots
**reserved** for tokens a request will write later, slots it never writes (**internal**
fragmentation: its region outlasts its answer), and free memory between regions that no
waiting request fits into (**external** fragmentation: the regions are contiguous).
`ContiguousAllocator` gives each request one contiguous region, first fit, so the
simulator can run those policies (`SchedulerConfig.reservation`), and `waste` counts the
three kinds at every step of a run while its queue is not empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmserve_ref.engine.block_manager import BlockError, BlockManager
from llmserve_ref.engine.kv_block import Block, blocks_for
from llmserve_ref.engine.request import Request, RequestStatus
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.workload import RequestSpec


# --8<-- [start:occupancy]
@dataclass(frozen=True)
class Occupancy:
    """Token-steps held under each policy, and token-steps holding live tokens.

    Summing over steps weights each request by how long it runs, which is how
    much of the memory it occupies over time.
    """

    live: int
    reserved: dict[str, int]
    seq_steps: int  # running requests, summed over steps

    def utilization(self, policy: str) -> float:
        """The fraction of what `policy` holds that holds a token."""
        return self.live / self.reserved[policy]

    def tokens_per_sequence(self, policy: str) -> float:
        """Tokens of KV memory a running sequence holds, on average, under `policy`."""
        return self.reserved[policy] / self.seq_steps


def occupancy(
    workload: Sequence[RequestSpec],
    max_tokens: int,
    max_model_len: int,
    block_sizes: Sequence[int] = (16,),
    max_num_seqs: int = 64,
) -> Occupancy:
    """Drive `workload` through the scheduler once per block size and count what is held.

    Every request asks for `max_tokens` (clipped to the context left) and stops
    after its own `output_len`, as a request ending at its end-of-sequence token does.
    """
    live = seq_steps = 0
    reserved = {"max_model_len": 0, "max_tokens": 0}
    for i, block_size in enumerate(block_sizes):
        name = f"paged, block {block_size}"
        reserved[name] = 0
        longest = max(r.prompt_len + r.output_len for r in workload)
        config = SchedulerConfig(
            token_budget=max(max_num_seqs, 2048),
            max_num_seqs=max_num_seqs,
            block_size=block_size,
            num_blocks=max_num_seqs * -(-longest // block_size) + 1,
            watermark=0.0,
        )
        scheduler = Scheduler(config)
        for r in workload:
            scheduler.add_request(Request(r.request_id, r.prompt_len, r.output_len))
        while scheduler.has_unfinished_requests():
            scheduler.update_from_output(scheduler.schedule())
            running = scheduler.running
            reserved[name] += scheduler.block_manager.num_used_blocks * block_size
            if i == 0:  # the same running set for every block size: count the rest once
                live += sum(r.num_computed_tokens for r in running)
                seq_steps += len(running)
                reserved["max_model_len"] += max_model_len * len(running)
                reserved["max_tokens"] += sum(
                    min(r.prompt_len + max_tokens, max_model_len) for r in running
                )
    return Occupancy(live, reserved, seq_steps)


# --8<-- [end:occupancy]


# --8<-- [start:contiguous]
class ContiguousAllocator(BlockManager):
    """One contiguous run of blocks per sequence, sized at admission and taken first fit.

    This is how an engine with a KV buffer per request allocates (the regions of the
    systems the PagedAttention paper compared). A sequence never grows past its
    region, so a reservation must cover its whole length. There is no prefix cache.
    `fragmented` is set when the last `blocks_needed` found enough free blocks for the
    sequence, but no run of them long enough: external fragmentation.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size, enable_prefix_caching=False)
        self.free_map = bytearray(b"\x01" * num_blocks)  # 1: block i is free
        self.fragmented = False

    def _first_fit(self, n: int) -> int:
        """The first block of the first run of `n` free blocks, or -1."""
        return self.free_map.find(b"\x01" * n)

    def blocks_needed(self, num_tokens, token_ids=None, salt=None, capacity=None) -> int:
        """Blocks the region takes; more than the pool has while no run is long enough."""
        n = blocks_for(max(num_tokens, capacity or 0), self.block_size)
        if self._first_fit(n) >= 0:
            return n
        self.fragmented = n <= self.num_free_blocks
        return self.num_blocks + 1

    def allocate(self, seq_id, num_tokens, token_ids=None, salt=None, capacity=None) -> int:
        n = blocks_for(max(num_tokens, capacity or 0), self.block_size)
        start = self._first_fit(n)
        if seq_id in self.tables or start < 0:
            raise BlockError(f"no free run of {n} blocks for {seq_id!r}, or it holds one")
        region = self.blocks[start : start + n]
        for block in region:
            self._hold(block)
        self.free_map[start : start + n] = bytes(n)
        self.tables[seq_id], self.prefixes[seq_id] = region, []
        return 0

    def _take(self) -> Block:
        raise BlockError("a contiguous region never grows: reserve the whole sequence")

    def free(self, seq_id: str) -> None:
        for block in self._table(seq_id):
            self.free_map[block.block_id] = 1
        super().free(seq_id)


def allocator(config: SchedulerConfig) -> BlockManager:
    """The allocator a simulated engine uses: contiguous regions for a reservation,
    the paged block manager otherwise. The simulator's block manager hashes blocks with
    Python's built-in `hash`, much cheaper than SHA-256 and as exact: the block manager
    compares whole keys, so what hits does not depend on the hash (engines keep SHA-256)."""
    if config.reservation == "paged":
        return BlockManager(
            config.num_blocks,
            config.block_size,
            config.enable_prefix_caching,
            hash_function=lambda parent, token_ids, salt: hash((parent, token_ids, salt)),
        )
    return ContiguousAllocator(config.num_blocks, config.block_size)


# --8<-- [end:contiguous]


# --8<-- [start:waste]
@dataclass(frozen=True)
class Waste:
    """Slot-steps of the KV pool by what they hold, summed over the steps of a run."""

    used: int  # tokens in the cache
    reserved: int  # held for tokens the request writes later
    internal: int  # held, never written: past the end of the answer
    external: int  # free, but in runs too short for the request waiting
    free: int
    seq_steps: int  # running requests, summed over steps
    steps: int

    def share(self, kind: str) -> float:
        """The fraction of the pool's slot-steps that `kind` is."""
        total = self.used + self.reserved + self.internal + self.external + self.free
        return getattr(self, kind) / total

    @property
    def batch(self) -> float:
        """Requests running at once, on average."""
        return self.seq_steps / self.steps


def waste(workload: Sequence[RequestSpec], config: SchedulerConfig) -> Waste:
    """Serve `workload` all at once under `config` and count what the pool's slots hold
    at every step while requests still wait: the engine at full load, its tail left out.
    Each request asks for its `max_tokens` and stops after `output_len`."""
    blocks = allocator(config)
    scheduler = Scheduler(config, block_manager=blocks)
    final = {r.request_id: r.prompt_len + r.output_len for r in workload}
    for r in workload:
        scheduler.add_request(Request(r.request_id, r.prompt_len, r.max_tokens or r.output_len))
    counts = dict.fromkeys(("used", "reserved", "internal", "external", "seq_steps"), 0)
    pool = config.num_blocks * config.block_size
    steps = 0
    contiguous = blocks if isinstance(blocks, ContiguousAllocator) else None
    while scheduler.has_unfinished_requests():
        if contiguous is not None:
            contiguous.fragmented = False
        for request in scheduler.update_from_output(scheduler.schedule()):
            if request.num_tokens == final[request.request_id] and (
                request.status is not RequestStatus.FINISHED
            ):
                scheduler.finish(request)  # its end-of-sequence token
        if not scheduler.waiting:
            break  # the queue is drained: what follows is the run's tail, not its load
        for request in scheduler.running:
            held = len(blocks.table(request.request_id)) * config.block_size
            end = min(held, final[request.request_id])
            counts["used"] += request.num_computed_tokens
            counts["reserved"] += end - request.num_computed_tokens
            counts["internal"] += held - end
        counts["seq_steps"] += len(scheduler.running)
        if contiguous is not None and contiguous.fragmented:
            counts["external"] += blocks.num_free_blocks * config.block_size
        steps += 1
    held = counts["used"] + counts["reserved"] + counts["internal"] + counts["external"]
    return Waste(free=pool * steps - held, steps=steps, **counts)


# --8<-- [end:waste]
