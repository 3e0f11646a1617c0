"""The engine core: continuous batching on paged KV, one step at a time, with no threads.

A step is four moves, vLLM's loop in miniature:

1. the `Scheduler` picks this step's tokens (decodes, prompt chunks, admissions)
   under the token budget, and the `BlockManager` behind it gives them KV
   blocks, sharing cached prefixes and preempting when memory runs out;
2. the `ModelRunner` runs ONE forward pass over all of them, packed;
3. every sequence that reached its end samples a token, each with its own
   sampling parameters and its own seeded generator;
4. the scheduler advances, and the core reports each new token.

Requests carry token ids in and token ids out; text, stop strings and streams
belong to the threaded `llmserve_ref.engine.batched_engine.BatchedEngine` that
serves HTTP with this core. `generate_batch` runs a list of prompts to the end,
offline:

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
>>> core.scheduler.block_manager.num_used_blocks  # everything freed (cached blocks are free)
0
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch

from llmserve_ref.engine.block_manager import BlockManager
from llmserve_ref.engine.model_runner import Chunk, ModelRunner
from llmserve_ref.engine.scheduler import Request, RequestStatus, Scheduler, SchedulerConfig
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
    params: SamplingParams
    generator: torch.Generator | None
    stop_token_ids: Collection[int]
    forks: list[CoreRequest] = field(default_factory=list)  # more samples of the same prompt

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(frozen=True, slots=True)
class TokenOutput:
    """One new token of one request; `finish_reason` is set on its last token."""

    request_id: str
    token_id: int
    finish_reason: str | None = None  # "stop" (a stop token) or "length" (max_tokens)
    logprobs: TokenLogprobs | None = None  # if the request asked for them
    num_cached_tokens: int | None = None  # on its first token: prompt tokens found cached


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
        self.stop_token_ids = frozenset(stop_token_ids)
        self.sequences: dict[str, CoreRequest] = {}
        self.num_steps = 0
        self.num_scheduled_tokens = 0

    def add_request(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        max_tokens: int,
        *,
        ignore_eos: bool = False,
        cache_salt: str | None = None,
        fork_of: str | None = None,
    ) -> None:
        """Queue a request. `fork_of` names an earlier request with the same prompt and
        `max_tokens` that has not sampled yet: this one becomes another sample of it
        (OpenAI's ``n``), sharing its prompt's blocks instead of computing them again."""
        if request_id in self.sequences:
            raise ValueError(f"request id {request_id!r} is in use")
        vocab_size = self.runner.model.config.vocab_size
        check_prompt(prompt_ids, max_tokens, self.max_model_len, vocab_size)
        params.check_vocab(vocab_size)
        request = Request(
            request_id, len(prompt_ids), max_tokens, list(prompt_ids), cache_salt=cache_salt
        )
        generator = None
        if params.seed is not None:
            generator = torch.Generator(self.runner.model.device).manual_seed(params.seed)
        stops = () if ignore_eos else self.stop_token_ids
        seq = CoreRequest(request, params, generator, stops)
        parent = self.sequences.get(fork_of) if fork_of is not None else None
        self.sequences[request_id] = seq
        if parent is not None and self._can_fork(parent, request):
            parent.forks.append(seq)
            parent.request.n += 1  # it takes a seat for the fork from now on
        else:
            self.scheduler.add_request(request)

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
            seq.request.n -= 1
            self.scheduler.add_request(fork.request)
        seq.forks.clear()

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def step(self) -> list[TokenOutput]:
        """Schedule, run the model once over every scheduled token, sample, advance."""
        out = self.scheduler.schedule()
        if not out.num_scheduled_tokens:
            return []
        chunks, sampling = [], []
        for request_id, n in sorted(out.num_scheduled_tokens.items(), key=lambda kv: kv[1] > 1):
            request = out.scheduled[request_id]  # decode chunks (one token) first
            start = request.num_computed_tokens
            samples = start + n == request.num_tokens
            table = self.scheduler.block_manager.table(request_id)
            chunks.append(Chunk(request.token_ids[start : start + n], start, table, samples))
            if samples:
                sampling.append(self.sequences[request_id])
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
                fork_token = fork.request.token_ids[-1]
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
        ids, n = seq.request.token_ids, seq.request.prompt_len
        return next_token(logits, seq.params, ids[:n], ids[n:], seq.generator, seq.stop_token_ids)

    def logprobs(
        self, logits: torch.Tensor, sequences: list[CoreRequest], tokens: list[int]
    ) -> list[TokenLogprobs | None]:
        """Each row's logprobs if its request asked; only those rows are gathered, so a
        step in which nobody asked costs nothing more."""
        asked = [i for i, s in enumerate(sequences) if s.params.logprobs is not None]
        found: list[TokenLogprobs | None] = [None] * len(sequences)
        if asked:
            rows = token_logprobs(
                logits[asked],
                [tokens[i] for i in asked],
                [sequences[i].params.logprobs for i in asked],
            )
            for i, row in zip(asked, rows, strict=True):
                found[i] = row
        return found

    def _forks(self, seq: CoreRequest, logits: torch.Tensor) -> list[CoreRequest]:
        """After `seq`'s first token: its forks sample theirs from the same logits and start."""
        forks, seq.forks = seq.forks, []
        for fork in forks:
            fork.request.token_ids.append(self._pick(fork, logits[None]))
            fork.request.num_cached_tokens = seq.request.num_cached_tokens
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
        request = seq.request
        cached = request.num_cached_tokens if request.num_output_tokens == 1 else None
        if request.status is RequestStatus.FINISHED:  # max_tokens reached
            self.sequences.pop(seq.request_id, None)
            return TokenOutput(seq.request_id, token, "length", logprobs, cached)
        if token in seq.stop_token_ids:
            self.scheduler.finish(request)
            self.sequences.pop(seq.request_id, None)
            return TokenOutput(seq.request_id, token, "stop", logprobs, cached)
        return TokenOutput(seq.request_id, token, None, logprobs, cached)


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
        core.add_request(str(i), prompt, p, max_tokens, ignore_eos=ignore_eos)
        outputs[str(i)] = []
    while core.has_unfinished_requests():
        for out in core.step():
            outputs[out.request_id].append(out.token_id)
    return [outputs[str(i)] for i in range(len(prompts))]
