"""The engine core: continuous batching on paged KV, one step at a time, with no threads.

A step is four moves, vLLM's loop in miniature:

1. the `Scheduler` picks this step's tokens (decodes, prompt chunks, admissions)
   under the token budget, and the `BlockManager` behind it gives them KV
   blocks, sharing cached prefixes and preempting when memory runs out;
2. the `ModelRunner` runs ONE forward pass over all of them, packed;
3. every sequence that reached its end samples a token, each with its own
   sampling parameters and its own seeded generator;
4. the scheduler advances, and the core reports each new token.

Requests (`EngineRequest`) carry token ids in, and `TokenOutput` token ids come out;
text, stop strings and streams belong to the output processor of the threaded
`llmserve_ref.engine.batched_engine.BatchedEngine` that serves HTTP with this core.
`generate_batch` runs a list of prompts to the end, offline:

>>> from llmserve_ref.model.weights import load_target
>>> from llmserve_ref.model.sampling import SamplingParams
>>> model, tokenizer = load_target("cpu")
>>> config = SchedulerConfig(token_budget=64, max_num_seqs=8, num_blocks=64, block_size=16)
>>> core = EngineCore(model, config)
>>> prompts = [tokenizer.encode(p, add_bos=True) for p in ("Once upon a time,", "The fox")]
>>> outputs = generate_batch(core, prompts, SamplingParams(temperature=0), max_tokens=8)
>>> # the same tokens as `generate` gives each prompt alone:
>>> [tokenizer.decode(o) for o in outputs]
[' there was a proud owl named Ava.', ' story about a story about a story about']
>>> core.stats().kv_blocks_used  # everything freed (cached blocks are free)
0
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch

from llmserve_ref.engine.block_manager import BlockManager
from llmserve_ref.engine.interface import EngineRequest, EngineStats, FinishReason, TokenOutput
from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk
from llmserve_ref.engine.request import Request, RequestStatus
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.model.generate import check_prompt
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import (
    SamplingParams,
    TokenLogprobs,
    next_token,
    token_logprobs,
)


@dataclass(eq=False)
class CoreRequest:
    """A request inside the core: the scheduler's view of it, and how it samples."""

    request: Request
    token_ids: list[int]  # the prompt, then each sampled token: the scheduler's list too
    params: SamplingParams
    generator: torch.Generator | None
    stop_token_ids: Collection[int]
    forks: list[CoreRequest] = field(default_factory=list)  # more samples of the same prompt
    scheduled_at: float | None = None  # when a step first ran any of its tokens

    @property
    def request_id(self) -> str:
        return self.request.request_id


class EngineCore:
    """A scheduler, a model runner and a sampler, stepped by whoever owns the core."""

    def __init__(
        self,
        model: Llama,
        config: SchedulerConfig,
        max_model_len: int | None = None,
        stop_token_ids: Collection[int] = (),
        block_manager: BlockManager | None = None,
    ) -> None:
        self.max_model_len = max_model_len or model.config.max_position_embeddings
        self.scheduler = Scheduler(config, self.max_model_len, block_manager)
        self.runner = ModelRunner(model, config.num_blocks, config.block_size)
        self.bytes_per_block = config.block_size * model.config.kv_bytes_per_token(model.dtype)
        self.stop_token_ids = frozenset(stop_token_ids)
        self.sequences: dict[str, CoreRequest] = {}
        self.num_steps = 0
        self.num_scheduled_tokens = 0

    def add_request(self, request: EngineRequest) -> None:
        """Queue `request`. Its `fork_of` may name an earlier request with the same prompt
        and `max_tokens` that has not sampled yet: this one becomes another sample of it
        (OpenAI's ``n``), sharing its prompt's blocks instead of computing them again."""
        r = request
        if r.request_id in self.sequences:
            raise ValueError(f"request id {r.request_id!r} is in use")
        vocab_size = self.runner.model.config.vocab_size
        check_prompt(r.prompt_ids, r.max_tokens, self.max_model_len, vocab_size)
        r.params.check_vocab(vocab_size)
        token_ids = list(r.prompt_ids)
        scheduled = Request(
            r.request_id, len(token_ids), r.max_tokens, token_ids, cache_salt=r.cache_salt
        )
        generator = None
        if r.params.seed is not None:
            generator = torch.Generator(self.runner.model.device).manual_seed(r.params.seed)
        stops = () if r.ignore_eos else self.stop_token_ids
        seq = CoreRequest(scheduled, token_ids, r.params, generator, stops)
        parent = self.sequences.get(r.fork_of) if r.fork_of is not None else None
        self.sequences[r.request_id] = seq
        if parent is not None and self._can_fork(parent, scheduled):
            parent.forks.append(seq)
            parent.request.n += 1  # it takes a seat for the fork from now on
        else:
            self.scheduler.add_request(scheduled)

    def _can_fork(self, parent: CoreRequest, child: Request) -> bool:
        """The parent has not sampled yet, has the same prompt and limit, and a seat is free
        (a running parent was admitted without this fork's seat)."""
        p, limit = parent.request, self.scheduler.config.max_num_seqs
        seat = p.status is RequestStatus.WAITING or self.scheduler.num_seats < limit
        return (
            p.status is not RequestStatus.FINISHED
            and p.num_output_tokens == 0
            and p.token_ids == child.token_ids
            and p.max_tokens == child.max_tokens
            and p.n < limit
            and seat
        )

    def abort(self, request_id: str) -> None:
        """Drop a request (its client went away, a stop string ended it): free its blocks now."""
        seq = self.sequences.pop(request_id, None)
        if seq is None:
            return
        if seq.request.status is not RequestStatus.FINISHED:
            self.scheduler.finish(seq.request)
        for fork in seq.forks:  # samples that were waiting to share its prompt go alone
            # equivalent mutant `n = 1`: n is 1 + its forks, so after the loop it is 1 either way
            seq.request.n -= 1  # pragma: no mutate
            self.scheduler.add_request(fork.request)
        seq.forks.clear()

    def request_ids(self) -> list[str]:
        """The requests the core holds, waiting or running."""
        return list(self.sequences)

    @property
    def idle(self) -> bool:
        """Nothing waits or runs: a step would do nothing."""
        return not self.scheduler.has_unfinished_requests()

    def stats(self) -> EngineStats:
        """The load and totals `/metrics` reports: the scheduler's, and the steps run here."""
        s = self.scheduler.make_stats()
        return EngineStats(
            running=s.num_running_reqs,
            waiting=s.num_waiting_reqs,
            kv_cache_bytes=s.kv_blocks_used * self.bytes_per_block,
            kv_blocks_used=s.kv_blocks_used,
            kv_blocks_total=s.kv_blocks_total,
            prefix_cache_queries=s.prefix_cache_queries,
            prefix_cache_hits=s.prefix_cache_hits,
            preemptions=s.num_preemptions,
            steps=self.num_steps,
            scheduled_tokens=self.num_scheduled_tokens,
        )

    def step(self) -> list[TokenOutput]:
        """Schedule, run the model once over every scheduled token, sample, advance."""
        out = self.scheduler.schedule()
        if not out.num_scheduled_tokens:
            return []
        chunks, sampling, now = [], [], time.monotonic()
        for request_id, n in sorted(out.num_scheduled_tokens.items(), key=lambda kv: kv[1] > 1):
            request = out.scheduled[request_id]  # decode chunks (one token) first
            start = request.num_computed_tokens
            samples = start + n == request.num_tokens
            table = out.block_table(request_id)
            seq = self.sequences[request_id]
            seq.scheduled_at = seq.scheduled_at or now
            chunks.append(Chunk(seq.token_ids[start : start + n], start, table, samples))
            if samples:
                sampling.append(seq)
        logits = self.runner.forward(chunks, out.blocks_to_copy)
        tokens = self.sample(logits, sampling)
        logprobs = self.logprobs(logits, sampling, tokens)
        self.num_steps += 1
        self.num_scheduled_tokens += out.total_num_scheduled_tokens
        sampled = {s.request_id: t for s, t in zip(sampling, tokens, strict=True)}
        self.scheduler.update_from_output(out, sampled)
        outputs = []
        for seq, token, row, lp in zip(sampling, tokens, logits, logprobs, strict=True):
            for fork in self._forks(seq, row):
                fork_token = fork.token_ids[-1]
                fork_lp = self.logprobs(row[None], [fork], [fork_token])[0]
                outputs.append(self._finish_check(fork, fork_token, fork_lp))
            outputs.append(self._finish_check(seq, token, lp))
        return outputs

    def sample(self, logits: torch.Tensor, sequences: list[CoreRequest]) -> list[int]:
        """One token per row of `logits`: every greedy row in one argmax, the rest one by one."""
        tokens = [0] * len(sequences)
        plain = [i for i, s in enumerate(sequences) if _is_plain_greedy(s.params)]
        if plain:
            for i, token in zip(plain, logits[plain].argmax(dim=-1).tolist(), strict=True):
                tokens[i] = token
        for i in set(range(len(sequences))) - set(plain):
            tokens[i] = self._pick(sequences[i], logits[i : i + 1])
        return tokens

    def _pick(self, seq: CoreRequest, logits: torch.Tensor) -> int:
        ids, n = seq.token_ids, seq.request.prompt_len
        return next_token(logits, seq.params, ids[:n], ids[n:], seq.generator, seq.stop_token_ids)

    def logprobs(
        self, logits: torch.Tensor, sequences: list[CoreRequest], tokens: list[int]
    ) -> list[TokenLogprobs | None]:
        """Each row's logprobs if its request asked; only those rows are gathered, so a
        step in which nobody asked costs nothing more."""
        asked = {
            i: s.params.logprobs for i, s in enumerate(sequences) if s.params.logprobs is not None
        }
        found: list[TokenLogprobs | None] = [None] * len(sequences)
        if asked:
            rows = token_logprobs(
                logits[list(asked)], [tokens[i] for i in asked], list(asked.values())
            )
            for i, row in zip(asked, rows, strict=True):
                found[i] = row
        return found

    def _forks(self, seq: CoreRequest, logits: torch.Tensor) -> list[CoreRequest]:
        """After `seq`'s first token: its forks sample theirs from the same logits and start."""
        forks, seq.forks = seq.forks, []
        for fork in forks:
            fork.token_ids.append(self._pick(fork, logits[None]))
            fork.request.num_cached_tokens = seq.request.num_cached_tokens
            fork.scheduled_at = seq.scheduled_at  # its prompt ran with its parent's
            if fork.request.max_tokens > 1:
                self.scheduler.fork(seq.request, fork.request)
            else:
                fork.request.num_output_tokens = 1
                fork.request.status = RequestStatus.FINISHED
        seq.request.n = 1
        return forks

    def _finish_check(
        self, seq: CoreRequest, token: int, logprobs: TokenLogprobs | None
    ) -> TokenOutput:
        request, reason = seq.request, None
        if request.status is RequestStatus.FINISHED:  # max_tokens reached
            reason = FinishReason.LENGTH
        elif token in seq.stop_token_ids:
            self.scheduler.finish(request)
            reason = FinishReason.STOP
        if reason is not None:
            self.sequences.pop(seq.request_id, None)
        first = request.num_output_tokens == 1
        return TokenOutput(
            seq.request_id, token, reason, logprobs,
            num_cached_tokens=request.num_cached_tokens if first else None,
            scheduled_at=seq.scheduled_at if first else None,
            num_preemptions=request.num_preemptions if reason is not None else 0,
        )  # fmt: skip


def _is_plain_greedy(params: SamplingParams) -> bool:
    """Greedy with nothing that moves the argmax: the argmax of the raw logits, no per-row
    work."""
    return (
        params.temperature == 0
        and params.repetition_penalty == 1.0
        and not params.frequency_penalty
        and not params.presence_penalty
        and not params.logit_bias
        and not params.min_tokens
    )


def generate_batch(
    core: EngineCore,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams | Sequence[SamplingParams],
    max_tokens: int,
    ignore_eos: bool = False,
) -> list[list[int]]:
    """Run `prompts` together through `core` until all finish; their new token ids, in order."""
    params = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
    outputs: dict[str, list[int]] = {}
    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        request = EngineRequest(
            list(prompt), p, max_tokens, request_id=str(i), ignore_eos=ignore_eos
        )
        core.add_request(request)
        outputs[str(i)] = []
    while not core.idle:
        for out in core.step():
            outputs[out.request_id].append(out.token_id)
    return [outputs[str(i)] for i in range(len(prompts))]
