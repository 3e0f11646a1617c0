"""The engine core: continuous batching on paged KV, one step at a time, with no threads.

A step is four moves, vLLM's loop in miniature:

1. the `Scheduler` picks this step's tokens (decodes, prompt chunks, admissions)
   under the token budget, and the `BlockManager` behind it gives them KV
   blocks, sharing cached prefixes and preempting when memory runs out;
2. the `ModelRunner` runs ONE forward pass over all of them, packed;
3. every sequence that reached its end samples a token, each with its own
   sampling parameters and its own seeded generator;
4. the scheduler advances, and the core reports each new token.

With a proposer (speculative decoding, `llmserve_ref.engine.speculative_config`), a
step first guesses each decoding sequence's next tokens (a draft model, once the step
has its blocks), and the forward pass scores its newest token and the guesses together,
like a short prompt chunk; `sample_tokens` accepts the guesses the sequence would have
drawn anyway, and the rest roll back.

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

import dataclasses
import itertools
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import torch

from llmserve_ref.engine.block_manager import BlockManager
from llmserve_ref.engine.draft_proposer import DraftProposer
from llmserve_ref.engine.interface import (
    EngineRequest,
    EngineStats,
    FinishReason,
    SpecDecodingStats,
    TokenOutput,
)
from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk
from llmserve_ref.engine.request import Request, RequestStatus
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.speculative_config import Proposer
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
        proposer: Proposer | None = None,
        max_guesses: Callable[[int], int] | None = None,
        compile_sizes: Sequence[int] = (),
    ) -> None:
        """`proposer`, if given, guesses each decoding sequence's next tokens every step, at
        most ``max_guesses(last step's batch size)``; `compile_sizes`: `ModelRunner`'s."""
        self.max_model_len = max_model_len or model.config.max_position_embeddings
        self.scheduler = Scheduler(config, self.max_model_len, block_manager)
        self.runner = ModelRunner(model, config.num_blocks, config.block_size, compile_sizes)
        self.bytes_per_block = config.block_size * model.config.kv_bytes_per_token(model.dtype)
        self.stop_token_ids = frozenset(stop_token_ids)
        self.sequences: dict[str, CoreRequest] = {}
        self.num_steps = self.num_scheduled_tokens = 0
        if isinstance(proposer, DraftProposer):  # its KV takes a share of every block
            self.bytes_per_block += proposer.fit(model, config)
        self.proposer, self.max_guesses, self.batch_size = proposer, max_guesses, 0
        self.spec_decoding = SpecDecodingStats()

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
        seed, device = r.params.seed, self.runner.model.device
        generator = torch.Generator(device).manual_seed(seed) if seed is not None else None
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
            spec_decoding=dataclasses.replace(self.spec_decoding),  # a copy: it goes on
        )

    def step(self) -> list[TokenOutput]:
        """Guess, schedule, run the model once over every scheduled token, sample (checking
        the guesses), advance."""
        if self.proposer is not None:
            self._propose()
        out = self.scheduler.schedule()
        self.batch_size = len(out.num_scheduled_tokens)
        if not out.num_scheduled_tokens:
            return []
        if isinstance(self.proposer, DraftProposer):  # its guesses need the step's blocks
            self.proposer.draft(out, {r.request_id for r in self.scheduler.running})
        chunks, sampling, guesses, now = [], [], [], time.monotonic()
        spec = out.scheduled_spec_decode_tokens
        for request_id, n in out.num_scheduled_tokens.items():  # (the runner packs them)
            request = out.scheduled[request_id]
            start = request.num_computed_tokens
            seq_guesses = spec.get(request_id, [])
            end = start + n - len(seq_guesses)  # the guesses come after the sequence's tokens
            samples = end == request.num_tokens
            table = out.block_table(request_id)
            seq = self.sequences[request_id]
            seq.scheduled_at = seq.scheduled_at or now
            tokens = (
                seq.token_ids[start:end] + seq_guesses if seq_guesses else seq.token_ids[start:end]
            )
            chunks.append(Chunk(tokens, start, table, samples, len(seq_guesses)))
            if samples:
                sampling.append(seq)
                guesses.append(seq_guesses)
        logits = self.runner.forward(chunks, out.blocks_to_copy)
        # Row `firsts[i]` of `logits` is sequence i's first position that samples.
        firsts = list(itertools.accumulate((1 + len(g) for g in guesses), initial=0))
        emitted = self.sample_tokens(logits, sampling, guesses, firsts)
        for seq_guesses, tokens in zip(guesses, emitted, strict=True):
            if seq_guesses:
                self.spec_decoding.observe(seq_guesses, tokens)
        self.num_steps += 1
        self.num_scheduled_tokens += out.total_num_scheduled_tokens
        ids = [s.request_id for s in sampling]
        sampled = {i: e[-1] for i, e in zip(ids, emitted, strict=True)}
        accepted = {i: e[:-1] for i, e in zip(ids, emitted, strict=True) if len(e) > 1}
        self.scheduler.update_from_output(out, sampled, accepted)
        # Every emitted token's logprobs at once, from the row it was drawn from.
        rows = [f + j for f, e in zip(firsts, emitted, strict=False) for j in range(len(e))]
        owners = [s for s, e in zip(sampling, emitted, strict=True) for _ in e]
        logprobs = iter(self.logprobs(logits, rows, owners, [t for e in emitted for t in e]))
        outputs = []
        for seq, tokens, first in zip(sampling, emitted, firsts, strict=False):
            for fork in self._forks(seq, logits[first]):
                fork_token = fork.token_ids[-1]
                fork_lp = self.logprobs(logits, [first], [fork], [fork_token])[0]
                outputs.extend(self._outputs(fork, [fork_token], [fork_lp]))
            outputs.extend(
                self._outputs(seq, tokens, list(itertools.islice(logprobs, len(tokens))))
            )
        return outputs

    def _propose(self) -> None:
        """Guesses for each decoding sequence that may emit more than one token more."""
        assert self.proposer is not None
        k = self.max_guesses(self.batch_size) if self.max_guesses else None
        if k == 0:
            return  # no guessing at this batch size
        for request in self.scheduler.running:  # (the engine's requests carry token ids)
            if request.is_decoding and request.max_tokens - request.num_output_tokens > 1:
                request.spec_token_ids = self.proposer.propose(request.token_ids or [])[:k]

    # --8<-- [start:verify]
    def sample_tokens(
        self,
        logits: torch.Tensor,
        sequences: list[CoreRequest],
        guesses: list[list[int]],
        firsts: list[int],
    ) -> list[list[int]]:
        """Each sequence's new tokens: its accepted guesses, then one it drew itself.

        Sequence i's rows of `logits` start at ``firsts[i]``, one per guess and one more.
        At each guess's position the sequence draws as it would without guesses (greedy
        rows all in one argmax, the others one by one with the same generator and the
        output so far, accepted guesses included). A draw equal to the guess accepts it
        and the next position is checked; the first that differs is emitted instead,
        and the rest is rolled back. This is `llmserve_ref.engine.speculative.verify`'s
        rule for a guess made with certainty: with q one-hot at the guess x, "accept if
        u < p(x) / q(x)" accepts with probability p(x), and a rejection draws from p
        without x, which is what a draw from p that is not x is. So the tokens are those
        of decoding one at a time, seeded or greedy, only sooner. A stop token ends the list.
        """
        plain = [_is_plain_greedy(s.params) for s in sequences]
        rows = [r for i, p in enumerate(plain) if p for r in range(firsts[i], firsts[i + 1])]
        best = dict(zip(rows, logits[rows].argmax(dim=-1).tolist(), strict=True)) if rows else {}
        emitted = []
        for i, (seq, seq_guesses) in enumerate(zip(sequences, guesses, strict=True)):
            tokens: list[int] = []
            for j, row in enumerate(range(firsts[i], firsts[i + 1])):
                token = best[row] if plain[i] else self._pick(seq, logits[row : row + 1], tokens)
                tokens.append(token)
                if j == len(seq_guesses) or token != seq_guesses[j] or token in seq.stop_token_ids:
                    break  # the draw differs from the guess: emit it, roll back the rest
            emitted.append(tokens)
        return emitted

    # --8<-- [end:verify]

    def _pick(self, seq: CoreRequest, logits: torch.Tensor, emitted: Sequence[int] = ()) -> int:
        ids, n = seq.token_ids, seq.request.prompt_len
        outputs = ids[n:] + list(emitted) if emitted else ids[n:]
        return next_token(logits, seq.params, ids[:n], outputs, seq.generator, seq.stop_token_ids)

    def logprobs(
        self,
        logits: torch.Tensor,
        rows: list[int],
        sequences: list[CoreRequest],
        tokens: list[int],
    ) -> list[TokenLogprobs | None]:
        """The logprobs of each token (drawn from row ``rows[i]`` of `logits`) if its
        request asked; only those rows are gathered, so a step in which nobody asked
        costs nothing more."""
        asked = {
            i: s.params.logprobs for i, s in enumerate(sequences) if s.params.logprobs is not None
        }
        found: list[TokenLogprobs | None] = [None] * len(sequences)
        if asked:
            found_rows = token_logprobs(
                logits[[rows[i] for i in asked]],
                [tokens[i] for i in asked],
                list(asked.values()),
            )
            for i, row in zip(asked, found_rows, strict=True):
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

    def _outputs(
        self, seq: CoreRequest, tokens: list[int], logprobs: list[TokenLogprobs | None]
    ) -> list[TokenOutput]:
        """The step's new tokens of `seq`, the last one saying why it ended, if it did."""
        request, reason = seq.request, None
        if request.status is RequestStatus.FINISHED:  # max_tokens reached
            reason = FinishReason.LENGTH
        elif tokens[-1] in seq.stop_token_ids:
            self.scheduler.finish(request)
            reason = FinishReason.STOP
        if reason is not None:
            self.sequences.pop(seq.request_id, None)
        before = request.num_output_tokens - len(tokens)  # tokens emitted in earlier steps
        last = len(tokens) - 1
        return [
            TokenOutput(
                seq.request_id, token, reason if i == last else None, lp,
                num_cached_tokens=request.num_cached_tokens if before + i == 0 else None,
                scheduled_at=seq.scheduled_at if before + i == 0 else None,
                num_preemptions=request.num_preemptions if i == last and reason else 0,
            )
            for i, (token, lp) in enumerate(zip(tokens, logprobs, strict=True))
        ]  # fmt: skip


def _is_plain_greedy(params: SamplingParams) -> bool:
    """Greedy with nothing that moves the argmax: the raw logits' argmax, no per-row work."""
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
        core.add_request(
            EngineRequest(list(prompt), p, max_tokens, request_id=str(i), ignore_eos=ignore_eos)
        )
        outputs[str(i)] = []
    while not core.idle:
        for out in core.step():
            outputs[out.request_id].append(out.token_id)
    return [outputs[str(i)] for i in range(len(prompts))]
