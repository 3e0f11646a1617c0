"""A batching scheduler: token budget, chunked prefill, paged KV blocks, preemption.

Every step of a serving engine runs one forward pass over a batch of tokens, and
the scheduler decides which: for each running request one decode token or a chunk
of its prompt, for each waiting request whether it may start. Two limits bind a
step, with vLLM's names: `token_budget` (vLLM's `max_num_batched_tokens`), the
tokens in one forward pass, and `max_num_seqs`, the requests running at once. A
prompt longer than what is left of the budget is split across steps (chunked
prefill, Sarathi-Serve, arXiv:2403.02310).

The KV cache is `num_blocks` blocks of `block_size` tokens (PagedAttention,
arXiv:2309.06180); a request's `block_table` lists the blocks holding its keys and
values. When decoding needs a block and none is free, the newest running request is
preempted by recompute: its blocks are freed, its `num_computed_tokens` drops to
zero and it returns to the front of the waiting queue, keeping the tokens it has
generated.

The scheduler counts tokens and never sees a model, so the same code drives the
simulator (`llmserve_ref.simulator`) and a real engine: call `schedule()`, run the
model on the scheduled tokens, call `update_from_output()`.

>>> s = Scheduler(SchedulerConfig(token_budget=8, max_num_seqs=4, block_size=4, num_blocks=8))
>>> a = Request("a", prompt_len=10, max_tokens=3)
>>> s.add_request(a)
>>> while s.has_unfinished_requests():
...     out = s.schedule()
...     sampled = s.update_from_output(out)
...     print(out.num_scheduled_tokens, a.num_output_tokens, a.block_table)
{'a': 8} 0 [0, 1, 2]
{'a': 2} 1 [0, 1, 2]
{'a': 1} 2 [0, 1, 2]
{'a': 1} 3 []
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Literal


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


# --8<-- [start:request]
@dataclass(eq=False, slots=True)
class Request:
    """One request, counted in tokens.

    `num_computed_tokens` is how many of its tokens (prompt, then outputs) have
    their keys and values in the cache. While it is below `num_tokens - 1` the
    request is prefilling; at `num_tokens - 1` it is decoding (the newest output
    token is the only one not yet fed back). The step that brings it level with
    `num_tokens` samples a new token.
    """

    request_id: str
    prompt_len: int
    max_tokens: int
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    num_skips: int = 0  # times a later request was admitted ahead of it

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def is_decoding(self) -> bool:
        return self.num_output_tokens > 0 and self.num_computed_tokens == self.num_tokens - 1


# --8<-- [end:request]


# --8<-- [start:config]
@dataclass(frozen=True)
class SchedulerConfig:
    """The knobs of one engine instance.

    `batching`: "continuous" admits a request whenever a slot and its blocks are
    free; "static" forms a batch only when the running set is empty and lets it
    run until its longest member finishes, reserving every member's blocks for
    its whole length (`prompt_len + max_tokens`) up front, as engines with
    fixed-shape batches did.

    `priority`: "decode" gives every running decode its token before any prompt
    chunk (stall-free batching, Sarathi-Serve; vLLM's default); "prefill" serves
    prompt chunks and new requests first and gives decodes what is left.

    `watermark`: the fraction of blocks that must stay free after a continuous
    admission (vLLM v0 used 0.01), room for running requests to grow into.

    `max_skips`: 0 is strict first-come-first-served: a waiting request whose
    blocks do not fit stops admission behind it. With k > 0, later requests may
    be admitted ahead of it, but only k times; then it blocks until it fits.
    """

    token_budget: int = 2048
    max_num_seqs: int = 256
    block_size: int = 16
    num_blocks: int = 4096
    batching: Literal["continuous", "static"] = "continuous"
    priority: Literal["decode", "prefill"] = "decode"
    watermark: float = 0.01
    max_skips: int = 0

    def __post_init__(self) -> None:
        for name in ("token_budget", "max_num_seqs", "block_size", "num_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.token_budget < self.max_num_seqs:
            raise ValueError(
                f"token_budget {self.token_budget} < max_num_seqs {self.max_num_seqs}: a step "
                "could not give every running request its decode token; raise token_budget"
            )
        if self.batching not in ("continuous", "static"):
            raise ValueError(f"batching is 'continuous' or 'static', got {self.batching!r}")
        if self.priority not in ("decode", "prefill"):
            raise ValueError(f"priority is 'decode' or 'prefill', got {self.priority!r}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark is a fraction in [0, 1), got {self.watermark}")
        if self.max_skips < 0:
            raise ValueError(f"max_skips must be 0 or more, got {self.max_skips}")

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_blocks)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens.

        >>> SchedulerConfig(block_size=16).blocks_for(33)
        3
        """
        return -(-num_tokens // self.block_size)


# --8<-- [end:config]


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
    `llmserve_ref.roofline.StepCost.step_time` takes them): `kv_tokens_read`, the
    cached tokens the scheduled requests attend to, and `attention_pairs`, the
    (query, key) pairs their causal attention scores.
    """

    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)
    total_num_scheduled_tokens: int = 0
    kv_tokens_read: int = 0
    attention_pairs: int = 0
    scheduled: dict[str, Request] = field(default_factory=dict, repr=False)

    def add(self, request: Request, num_tokens: int) -> None:
        self.scheduled[request.request_id] = request
        self.num_scheduled_tokens[request.request_id] = num_tokens
        self.total_num_scheduled_tokens += num_tokens
        self.kv_tokens_read += request.num_computed_tokens
        self.attention_pairs += pairs(num_tokens, request.num_computed_tokens)

    def remove(self, request: Request) -> None:
        num_tokens = self.num_scheduled_tokens.pop(request.request_id, 0)
        if num_tokens:
            del self.scheduled[request.request_id]
            self.total_num_scheduled_tokens -= num_tokens
            self.kv_tokens_read -= request.num_computed_tokens
            self.attention_pairs -= pairs(num_tokens, request.num_computed_tokens)


class Scheduler:
    """A waiting queue, a running list in admission order, and a pool of KV blocks."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.free_blocks: list[int] = list(range(config.num_blocks - 1, -1, -1))
        self.num_preemptions = 0

    # --8<-- [start:add_request]
    def add_request(self, request: Request) -> None:
        """Queue a request, or refuse one that could never run.

        A request whose whole sequence needs more blocks than the pool has would
        wait forever at the head of the queue and block everyone behind it, so it
        is refused here, with what to change.
        """
        if request.prompt_len < 1 or request.max_tokens < 1:
            raise ValueError(
                f"request {request.request_id!r}: prompt_len and max_tokens must be at least 1, "
                f"got {request.prompt_len} and {request.max_tokens}"
            )
        if not request.num_output_tokens < request.max_tokens:
            raise ValueError(f"request {request.request_id!r} has already generated max_tokens")
        if not 0 <= request.num_computed_tokens < request.num_tokens:
            raise ValueError(
                f"request {request.request_id!r}: num_computed_tokens must be in "
                f"[0, {request.num_tokens}), got {request.num_computed_tokens}"
            )
        needed = self.config.blocks_for(request.prompt_len + request.max_tokens)
        if needed > self.config.num_blocks:
            raise ValueError(
                f"request {request.request_id!r} needs {needed} KV blocks for "
                f"{request.prompt_len} prompt + {request.max_tokens} max_tokens at block_size "
                f"{self.config.block_size}, but the whole cache has {self.config.num_blocks}; "
                "shorten the prompt or max_tokens, or give the cache more blocks"
            )
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    # --8<-- [end:add_request]

    # --8<-- [start:schedule]
    def schedule(self) -> SchedulerOutput:
        """Pick this step's tokens: decodes, prompt chunks and admissions, in priority order."""
        out = SchedulerOutput()
        if self.config.priority == "decode":
            self._schedule_decodes(out)
            self._schedule_prefills(out)
            self._admit(out)
        else:
            self._schedule_prefills(out)
            self._admit(out)
            self._schedule_decodes(out)
        return out

    def _budget_left(self, out: SchedulerOutput) -> int:
        return self.config.token_budget - out.total_num_scheduled_tokens

    def _schedule_decodes(self, out: SchedulerOutput) -> None:
        for request in list(self.running):  # oldest first; preemption shrinks the list
            if request.status is not RequestStatus.RUNNING or not request.is_decoding:
                continue
            if self._budget_left(out) == 0:
                return
            if self._grow(request, out):
                out.add(request, 1)

    def _schedule_prefills(self, out: SchedulerOutput) -> None:
        for request in self.running:
            if request.is_decoding:
                continue
            chunk = min(request.num_tokens - request.num_computed_tokens, self._budget_left(out))
            if chunk == 0:
                return
            out.add(request, chunk)

    # --8<-- [end:schedule]

    # --8<-- [start:admit]
    def _admit(self, out: SchedulerOutput) -> None:
        """Move waiting requests to running while a slot, the budget and their blocks allow."""
        static = self.config.batching == "static"
        if static and self.running:
            return  # a static batch runs until its last member finishes
        skipped: list[Request] = []
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            if not static and self._budget_left(out) == 0:
                break  # a static batch forms at once; its prompts may start in later steps
            request = self.waiting[0]
            tokens = request.prompt_len + request.max_tokens if static else request.num_tokens
            needed = self.config.blocks_for(tokens)
            headroom = self.config.watermark_blocks if self.running and not static else 0
            if needed + headroom > len(self.free_blocks):
                if request.num_skips >= self.config.max_skips:
                    break  # head-of-line: nobody behind it goes first
                request.num_skips += 1
                skipped.append(self.waiting.popleft())
                continue
            self.waiting.popleft()
            self._allocate(request, needed)
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            chunk = min(request.num_tokens - request.num_computed_tokens, self._budget_left(out))
            if chunk:
                out.add(request, chunk)
        self.waiting.extendleft(reversed(skipped))

    # --8<-- [end:admit]

    # --8<-- [start:preempt]
    def _grow(self, request: Request, out: SchedulerOutput) -> bool:
        """Give a decoding request a block for its next token, preempting if none is free.

        The victim is the newest running request, possibly `request` itself, so the
        oldest running request is never preempted and always makes progress.
        Returns whether `request` is still running.
        """
        needed = self.config.blocks_for(request.num_tokens) - len(request.block_table)
        if needed <= 0:
            return True  # room left in its last block
        while needed > len(self.free_blocks):
            victim = self.running[-1]
            self._preempt(victim, out)
            if victim is request:
                return False
        self._allocate(request, needed)
        return True

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        """Recompute preemption: drop its cache, keep its outputs, queue it first."""
        out.remove(request)  # it may already hold a chunk of this step
        self.running.remove(request)
        self._free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)
        out.preempted.append(request.request_id)

    # --8<-- [end:preempt]

    def _allocate(self, request: Request, num_blocks: int) -> None:
        request.block_table.extend(self.free_blocks.pop() for _ in range(num_blocks))

    def _free(self, request: Request) -> None:
        self.free_blocks.extend(reversed(request.block_table))
        request.block_table = []

    # --8<-- [start:update]
    def update_from_output(self, out: SchedulerOutput) -> list[Request]:
        """Advance the scheduled requests after the forward pass; return those that sampled.

        A request whose computed tokens reach its length samples one token; one that
        reaches `max_tokens` finishes and frees its blocks.
        """
        sampled = []
        finished = False
        for request_id, num_tokens in out.num_scheduled_tokens.items():
            request = out.scheduled[request_id]
            request.num_computed_tokens += num_tokens
            if request.num_computed_tokens == request.num_tokens:
                request.num_output_tokens += 1
                sampled.append(request)
                if request.num_output_tokens == request.max_tokens:
                    request.status = RequestStatus.FINISHED
                    self._free(request)
                    finished = True
        if finished:
            self.running = [r for r in self.running if r.status is RequestStatus.RUNNING]
        return sampled

    # --8<-- [end:update]

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)
