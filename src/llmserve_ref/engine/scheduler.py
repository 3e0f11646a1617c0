"""A batching scheduler: token budget, chunked prefill, paged KV blocks, preemption.

Every step of a serving engine runs one forward pass over a batch of tokens, and
the scheduler decides which: for each running request one decode token or a chunk
of its prompt, for each waiting request whether it may start. Two limits bind a
step, with vLLM's names: `token_budget` (vLLM's `max_num_batched_tokens`), the
tokens in one forward pass, and `max_num_seqs`, the requests running at once. A
prompt longer than what is left of the budget is split across steps (chunked
prefill, Sarathi-Serve, arXiv:2403.02310).

The KV cache is `num_blocks` blocks of `block_size` tokens (PagedAttention,
arXiv:2309.06180), handed out by a `BlockManager`, which keeps each request's
block table and, when requests carry their token ids, a prefix cache. When
decoding needs a block and none is free, the newest running request is
preempted by recompute, as in vLLM: its blocks are freed, its
`num_computed_tokens` drops to what the prefix cache still holds, and it returns
to the front of the waiting queue, keeping the tokens it has generated. It comes
back like any request, with blocks for the tokens it has and none reserved for
those it may still generate, and no request is admitted in a step that
preempted. First come, first served keeps the running list in arrival order, so
the victim is always the latest arrival, and the oldest running request always
progresses: it is never preempted, since its whole length fits in the pool
(`SchedulerConfig.check_fits`).

A decoding request may carry guesses at its next tokens (`Request.spec_token_ids`,
speculative decoding): it is then scheduled its newest token and the guesses that
fit the budget and its `max_tokens`, all written to the cache in one step, and
`update_from_output` takes back the slots of the guesses the model rejected.

The scheduler counts tokens and never sees a model, so the same code drives the
simulator (`llmserve_ref.planning.simulator`) and a real engine: call
`schedule()`, run the model on the scheduled tokens, call `update_from_output()`.

>>> s = Scheduler(SchedulerConfig(token_budget=8, max_num_seqs=4, block_size=4, num_blocks=8))
>>> a = Request("a", prompt_len=10, max_tokens=3)
>>> s.add_request(a)
>>> while s.has_unfinished_requests():
...     out = s.schedule()
...     sampled = s.update_from_output(out)
...     print(out.num_scheduled_tokens, a.num_output_tokens, s.block_table(a))
{'a': 8} 0 [0, 1, 2]
{'a': 2} 1 [0, 1, 2]
{'a': 1} 2 [0, 1, 2]
{'a': 1} 3 []
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from llmserve_ref.engine.block_manager import BlockManager
from llmserve_ref.engine.kv_block import blocks_for
from llmserve_ref.engine.request import Request, RequestStatus
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.scheduler_output import SchedulerOutput, SchedulerStats


class Scheduler:
    """A waiting queue, a running list in admission order, and a pool of KV blocks."""

    def __init__(
        self,
        config: SchedulerConfig,
        max_model_len: int | None = None,
        block_manager: BlockManager | None = None,
    ) -> None:
        """`block_manager` is any allocator with `BlockManager`'s methods (default: one)."""
        self.config = config
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        width = None if max_model_len is None else blocks_for(max_model_len, config.block_size)
        self.block_manager = block_manager or BlockManager(
            config.num_blocks, config.block_size, config.enable_prefix_caching, width
        )
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
        if request.token_ids is not None and len(request.token_ids) != request.num_tokens:
            raise ValueError(
                f"request {request.request_id!r} has {len(request.token_ids)} token ids for "
                f"{request.num_tokens} tokens (prompt_len + num_output_tokens)"
            )
        if request.n < 1 or request.n > self.config.max_num_seqs:
            raise ValueError(
                f"request {request.request_id!r}: n={request.n} sequences must be between 1 and "
                f"max_num_seqs ({self.config.max_num_seqs})"
            )
        self.config.check_fits(request.request_id, request.prompt_len, request.max_tokens)
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
        out.blocks_to_copy = list(self.block_manager.pending_copies)
        out.block_table = self.block_manager.table
        return out

    def _budget_left(self, out: SchedulerOutput) -> int:
        return self.config.token_budget - out.total_num_scheduled_tokens

    def _schedule_decodes(self, out: SchedulerOutput) -> None:
        for request in list(self.running):  # oldest first; preemption shrinks the list
            if request.status is not RequestStatus.RUNNING or not request.is_decoding:
                continue
            if self._budget_left(out) == 0:
                return
            guesses = self._guesses(request, out)
            if self._grow(request, out, 1 + len(guesses)):
                out.add(request, 1 + len(guesses))
                if guesses:
                    out.scheduled_spec_decode_tokens[request.request_id] = guesses

    def _guesses(self, request: Request, out: SchedulerOutput) -> list[int]:
        """The request's guesses that this step checks: as many as the budget has room for
        beside its newest token, and fewer than the tokens it may still generate (a step
        emits the accepted guesses and one token more)."""
        guesses, request.spec_token_ids = request.spec_token_ids, []
        room = min(self._budget_left(out) - 1, request.max_tokens - request.num_output_tokens - 1)
        return guesses[: max(room, 0)]

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
        if out.preempted:
            return  # memory ran out this step: an admission now would be the next victim
        blocks = self.block_manager
        skipped: list[Request] = []
        while self.waiting:
            if not static and self._budget_left(out) == 0:
                break  # a static batch forms at once; its prompts may start in later steps
            request = self.waiting[0]
            if self.num_seats + request.n > self.config.max_num_seqs:
                break
            capacity = self._capacity(request)
            needed = blocks.blocks_needed(
                request.num_tokens, request.token_ids, request.cache_salt, capacity
            )
            headroom = self.config.watermark_blocks if self.running and not static else 0
            if needed + headroom > blocks.num_free_blocks:
                if request.num_skips >= self.config.max_skips:
                    break  # head-of-line: nobody behind it goes first
                request.num_skips += 1
                skipped.append(self.waiting.popleft())
                continue
            self.waiting.popleft()
            cached = blocks.allocate(
                request.request_id,
                request.num_tokens,
                request.token_ids,
                request.cache_salt,
                capacity,
            )
            # A request handed over with its KV cache (disaggregated serving) keeps its count.
            request.num_computed_tokens = max(request.num_computed_tokens, cached)
            if request.num_cached_tokens < 0:  # a resumed request keeps its first count
                request.num_cached_tokens = request.num_computed_tokens
            request.reserved = capacity > request.num_tokens
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            chunk = min(request.num_tokens - request.num_computed_tokens, self._budget_left(out))
            if chunk:
                out.add(request, chunk)
        self.waiting.extendleft(reversed(skipped))

    def _capacity(self, request: Request) -> int:
        """Tokens to hold blocks for at admission: a static batch's member its whole
        length, since it never grows; any other request, one resumed after a preemption
        included, what it has (reserving its `max_tokens` would strand the memory that
        paging frees). A simulated `reservation` holds its whole region from the start."""
        if self.config.reservation == "context":
            assert self.config.max_model_len is not None  # SchedulerConfig requires it
            return self.config.max_model_len
        if self.config.batching == "static" or self.config.reservation == "max_tokens":
            return request.prompt_len + request.max_tokens
        return request.num_tokens

    # --8<-- [end:admit]

    # --8<-- [start:preempt]
    def _grow(self, request: Request, out: SchedulerOutput, num_new_tokens: int = 1) -> bool:
        """Give a decoding request room for its next tokens, preempting if no block is free.

        The victim is the newest running request that holds no reservation,
        possibly `request` itself, so the oldest running request is never
        preempted and always makes progress. Returns whether `request` still runs.
        """
        blocks = self.block_manager
        computed = request.num_computed_tokens
        while not blocks.append_slots(request.request_id, computed, computed + num_new_tokens):
            victim = next((r for r in reversed(self.running) if not r.reserved), None)
            if victim is None:
                raise RuntimeError(f"no running request can be preempted for {request!r}")
            self._preempt(victim, out)
            if victim is request:
                return False
        return True

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        """Recompute preemption: drop its cache, keep its outputs, queue it first."""
        out.remove(request)  # it may already hold a chunk of this step
        self.running.remove(request)
        self.block_manager.free(request.request_id)
        request.num_computed_tokens = 0
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)
        out.preempted.append(request.request_id)

    # --8<-- [end:preempt]

    # --8<-- [start:update]
    def update_from_output(
        self,
        out: SchedulerOutput,
        sampled_token_ids: Mapping[str, int] | None = None,
        accepted_token_ids: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Request]:
        """Advance the scheduled requests after the forward pass; return those that sampled.

        A request whose computed tokens reach its length samples one token (its id in
        `sampled_token_ids`, for requests that carry token ids); one that reaches
        `max_tokens` finishes and frees its blocks. Its full blocks enter the prefix
        cache as soon as they are computed.

        A speculating request's step emits the leading guesses the model accepted
        (`accepted_token_ids`), then its sampled token. The rejected guesses are rolled
        back: they do not count as computed (their slots are written again next step),
        the blocks that held only them are freed, and so none of them can reach the
        prefix cache, which takes computed tokens only.
        """
        self.block_manager.copies_done()
        sampled = []
        finished = False
        for request_id, num_tokens in out.num_scheduled_tokens.items():
            request = out.scheduled[request_id]
            guesses = out.scheduled_spec_decode_tokens.get(request_id, [])
            accepted = list(accepted_token_ids.get(request_id, ())) if accepted_token_ids else []
            if accepted and accepted != guesses[: len(accepted)]:
                raise ValueError(
                    f"request {request_id!r}: accepted tokens {accepted} are not "
                    f"a prefix of its guesses {guesses}"
                )
            request.num_computed_tokens += num_tokens - (len(guesses) - len(accepted))
            request.num_output_tokens += len(accepted)
            if accepted:
                assert request.token_ids is not None, "only requests with token ids guess"
                request.token_ids.extend(accepted)
            if request.token_ids is not None:
                self.block_manager.cache_full_blocks(
                    request_id, request.token_ids, request.num_computed_tokens, request.cache_salt
                )
            if request.num_computed_tokens == request.num_tokens:
                if request.token_ids is not None:
                    assert sampled_token_ids is not None, "requests with token ids sample"
                    request.token_ids.append(sampled_token_ids[request_id])
                request.num_output_tokens += 1
                sampled.append(request)
                if request.num_output_tokens == request.max_tokens:
                    request.status = RequestStatus.FINISHED
                    self.block_manager.free(request_id)
                    finished = True
                    continue
            if len(accepted) < len(guesses) and not request.reserved:
                self.block_manager.truncate(request_id, request.num_tokens)
        if finished:
            self.running = [r for r in self.running if r.status is RequestStatus.RUNNING]
        return sampled

    # --8<-- [end:update]

    def finish(self, request: Request) -> None:
        """End `request` now (a stop token, a stop string, a client gone): free its blocks."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
            self.block_manager.free(request.request_id)
        elif request.status is RequestStatus.WAITING:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED

    def fork(self, parent: Request, child: Request) -> None:
        """Start `child`, another sample of `parent`'s prompt, on `parent`'s blocks.

        Call it when `parent` has sampled its first token, with `child` holding the
        same prompt and its own first token. The two share every block; the first
        to write into the shared, partly filled last block copies it first.
        """
        if parent.status is not RequestStatus.RUNNING or parent.num_output_tokens != 1:
            raise ValueError(f"fork {parent.request_id!r} right after its first token")
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_cached_tokens = parent.num_cached_tokens
        child.num_output_tokens = 1
        child.status = RequestStatus.RUNNING
        self.block_manager.fork(parent.request_id, child.request_id)
        self.running.append(child)

    def block_table(self, request: Request) -> list[int]:
        """The block ids holding `request`'s keys and values ([] while it holds none)."""
        if request.request_id not in self.block_manager.tables:
            return []
        return self.block_manager.table(request.request_id)

    @property
    def num_free_blocks(self) -> int:
        return self.block_manager.num_free_blocks

    @property
    def num_seats(self) -> int:
        """Seats taken in the running set: a request that will fork into n takes n."""
        return sum(r.n for r in self.running)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    def make_stats(self) -> SchedulerStats:
        blocks = self.block_manager
        return SchedulerStats(
            len(self.running),
            len(self.waiting),
            self.num_preemptions,
            blocks.num_used_blocks,
            blocks.num_blocks,
            blocks.num_queries,
            blocks.num_hits,
        )
