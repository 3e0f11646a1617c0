"""What one scheduler step hands the engine, and the scheduler's counts for `/metrics`.

`Scheduler.schedule()` returns a `SchedulerOutput` (vLLM's name): the tokens each
request runs this step, the guesses a speculating request checks, who was preempted,
the copy-on-write copies to make first, and the two sums a step-time model needs.
`Scheduler.make_stats()` returns `SchedulerStats`.

>>> from llmserve_ref.engine.request import Request
>>> out = SchedulerOutput()
>>> out.add(Request("a", prompt_len=4, max_tokens=2), num_tokens=4)  # a whole 4-token prompt
>>> out.total_num_scheduled_tokens, out.attention_pairs
(4, 10)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from llmserve_ref.engine.request import Request


def pairs(num_tokens: int, num_cached: int) -> int:
    """(query, key) pairs `num_tokens` new tokens score after `num_cached` cached ones, causally.

    >>> pairs(1, 99), pairs(4, 0)  # a decode token; a 4-token prompt
    (100, 10)
    """
    return num_tokens * num_cached + num_tokens * (num_tokens + 1) // 2


@dataclass
class SchedulerOutput:
    """What one step runs: tokens per request id, and who was preempted to make room.

    With the token count, the two sums a step-time model needs (as
    `llmserve_ref.planning.roofline.StepCost.step_time` takes them): `kv_tokens_read`, the
    cached tokens the scheduled requests attend to, and `attention_pairs`, the
    (query, key) pairs their causal attention scores.
    """

    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    total_num_scheduled_tokens: int = 0
    kv_tokens_read: int = 0
    attention_pairs: int = 0
    scheduled: dict[str, Request] = field(default_factory=dict, repr=False)
    # The guesses each speculating request's step checks (vLLM's name), after its newest token.
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    # Copy-on-write: (source, destination) blocks the engine copies before the forward pass.
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    # The block table of a scheduled request, by id, read when the engine asks (the
    # simulator never does, so building every table every step would cost it for nothing).
    block_table: Callable[[str], list[int]] = field(default=lambda request_id: [], repr=False)

    def add(self, request: Request, num_tokens: int) -> None:
        self.scheduled[request.request_id] = request
        self.num_scheduled_tokens[request.request_id] = num_tokens
        self.total_num_scheduled_tokens += num_tokens
        self.kv_tokens_read += request.num_computed_tokens
        self.attention_pairs += pairs(num_tokens, request.num_computed_tokens)

    def remove(self, request: Request) -> None:
        # equivalent mutants: 0 and None are both falsy and num_tokens is read only when truthy
        num_tokens = self.num_scheduled_tokens.pop(request.request_id, 0)  # pragma: no mutate
        if num_tokens:
            del self.scheduled[request.request_id]
            self.scheduled_spec_decode_tokens.pop(request.request_id, None)
            self.total_num_scheduled_tokens -= num_tokens
            self.kv_tokens_read -= request.num_computed_tokens
            self.attention_pairs -= pairs(num_tokens, request.num_computed_tokens)


@dataclass(frozen=True)
class SchedulerStats:
    """The scheduler's load now and its totals, with vLLM's names: what `/metrics` shows."""

    num_running_reqs: int
    num_waiting_reqs: int
    num_preemptions: int
    kv_blocks_used: int  # held by requests (cached blocks no request holds are free)
    kv_blocks_total: int
    prefix_cache_queries: int  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int  # ... and found there
