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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmserve_ref.engine.scheduler import Request, Scheduler, SchedulerConfig
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
