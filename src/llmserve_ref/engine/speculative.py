"""Speculative decoding: a small draft model guesses, the target model checks several at once.

A decode step of a large model is memory-bound: it streams every weight to
compute one token, and would have streamed them just the same to compute a few.
Speculative decoding (Leviathan, Kalman and Matias, 2023; Chen et al., 2023)
spends that slack. Each round

1. the **draft** model, much cheaper, proposes `gamma` tokens autoregressively
   (with its own KV cache), drawing each from its distribution q;
2. the **target** model scores the newest token and all `gamma` guesses in ONE
   forward pass (gamma + 1 positions, with its KV cache), which gives its
   distribution p at every position;
3. `verify` accepts a prefix of the guesses and adds one token of its own, so a
   round emits between 1 and gamma + 1 tokens for a single target forward;
4. both KV caches are rolled back (`KVCache.truncate`) to the verified tokens:
   the entries of rejected guesses are forgotten and overwritten next round.

Verification is rejection sampling: accept a guess x with probability
min(1, p(x) / q(x)); at the first rejection, draw a replacement from the residual
norm(max(0, p − q)); if every guess passed, draw a bonus token from p. The tokens
that come out are distributed exactly as the target's own samples, whatever the
draft. With temperature 0, p and q are one-hot and the rule becomes greedy
verification: keep the guesses while they equal the target's argmax, then emit
the target's argmax. The output is then the target's own greedy output.

The notation is the papers': p is the target's distribution, q the draft's,
gamma the number of guesses per round, alpha the rate at which guesses are
accepted. Random draws use a CPU `torch.Generator`, so a seed gives the same
tokens on every device (up to float differences between devices' logits).

>>> p = torch.tensor([[0.6, 0.4, 0.0], [0.5, 0.5, 0.0]])  # target, gamma + 1 = 2 positions
>>> q = torch.tensor([[0.0, 0.0, 1.0]])                    # the draft was sure of token 2
>>> g = torch.Generator().manual_seed(0)
>>> emitted = verify([2], q, p, g)  # p(2) = 0: rejected, replaced by a draw from max(0, p - q)
>>> len(emitted), emitted[0] in (0, 1)
(1, True)
>>> expected_tokens_per_forward(alpha=0.5, gamma=3)  # 1 + 1/2 + 1/4 + 1/8
1.875
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields

import torch

from llmserve_ref.model.forward_step import forward_step
from llmserve_ref.model.generate import check_prompt
from llmserve_ref.model.kv_cache import KVCache
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import SamplingParams, process_logits, sample


# --8<-- [start:probabilities]
def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a sampler with `params` draws from, on the CPU: transforms, then softmax.

    Target and draft go through the same transforms (temperature, top-k, top-p,
    min-p), so p and q are the distributions the two would really sample from.
    With temperature 0 only the argmax survives and the distribution is one-hot.
    """
    return process_logits(logits.float(), params).softmax(dim=-1).cpu()


# --8<-- [end:probabilities]


# --8<-- [start:residual]
def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """What to sample after a rejection: norm(max(0, p − q)), or p when that is rounding noise.

    The mass of max(0, p − q) is the total variation distance between p and q,
    which is also the probability that this position rejects at all. When p and
    q agree to within float rounding, the mass can round to zero (normalizing
    would divide by zero) although a rejection just happened. Sampling from p
    then changes the output's distribution by at most that mass: a rounding error.
    """
    r = (p - q).clamp(min=0)
    mass = r.sum()
    if mass <= torch.finfo(r.dtype).eps:
        return p
    return r / mass


# --8<-- [end:residual]


# --8<-- [start:verify]
def verify(
    draft_tokens: Sequence[int],
    q: torch.Tensor,
    p: torch.Tensor,
    generator: torch.Generator | None = None,
) -> list[int]:
    """Rejection sampling: the accepted prefix of `draft_tokens`, then one token from the target.

    ``q[i]`` is the draft's distribution that ``draft_tokens[i]`` was drawn from and
    ``p[i]`` the target's at the same position; ``p[gamma]`` is the target's
    distribution after all gamma guesses. Shapes: q ``[gamma, vocab]``, p
    ``[gamma + 1, vocab]``. The result has 1 to gamma + 1 tokens.
    """
    gamma, vocab = len(draft_tokens), p.shape[-1]
    if p.shape != (gamma + 1, vocab) or q.shape != (gamma, vocab):
        raise ValueError(
            f"for {gamma} draft tokens p must be [{gamma + 1}, vocab] and q [{gamma}, vocab]; "
            f"got p {list(p.shape)} and q {list(q.shape)}"
        )
    outside = [x for x in draft_tokens if not 0 <= x < vocab]
    if outside:
        raise ValueError(f"draft token ids {outside} are outside the vocabulary [0, {vocab})")
    x = torch.tensor(draft_tokens, dtype=torch.long, device=p.device)
    rows = torch.arange(gamma, device=p.device)
    u = torch.rand(gamma, generator=generator, device=p.device)
    # Accept x_i with probability min(1, p_i(x_i) / q_i(x_i)): u < p/q, without dividing by q.
    accepted = (u * q[rows, x] < p[rows, x]).tolist()
    n = accepted.index(False) if False in accepted else gamma
    # x_n rejected: a replacement from the residual. All gamma accepted: a bonus token from p.
    last = residual(p[n], q[n]) if n < gamma else p[gamma]
    return [*draft_tokens[:n], int(sample(last, generator))]


# --8<-- [end:verify]


# --8<-- [start:propose]
def propose(
    draft: Llama,
    cache: KVCache,
    pending: Sequence[int],
    gamma: int,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> tuple[list[int], torch.Tensor]:
    """The draft's `gamma` guesses, one forward each, and the distributions q they came from.

    `pending` are the tokens of the sequence that the draft's cache has not seen:
    the newest token, and after a round that accepted every guess also the last
    guess. The first forward feeds them all. Returns the tokens and q ``[gamma, vocab]``.
    """
    tokens: list[int] = []
    q = torch.empty(gamma, draft.config.vocab_size)
    feed = list(pending)
    for i in range(gamma):
        logits = draft(torch.tensor([feed], device=draft.device), cache)[0, -1]
        q[i] = probabilities(logits, params)
        tokens.append(int(sample(q[i], generator)))
        feed = tokens[-1:]
    return tokens, q


# --8<-- [end:propose]


# --8<-- [start:round]
@torch.inference_mode()
def speculative_round(
    target: Llama,
    draft: Llama,
    target_cache: KVCache,
    draft_cache: KVCache,
    tokens: Sequence[int],
    gamma: int,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> list[int]:
    """Draft `gamma` guesses, verify them in one target forward, roll both caches back.

    `tokens` is the sequence so far. The target's cache holds all of it but the
    newest token; the draft's cache holds a prefix of it. Returns the 1 to
    gamma + 1 new tokens; afterwards both caches hold only verified tokens.
    """
    n = len(tokens)
    guesses, q = propose(draft, draft_cache, tokens[draft_cache.length :], gamma, params, generator)
    # One target forward over the newest token and the guesses: p at gamma + 1 positions.
    scored = torch.tensor([[tokens[-1], *guesses]], device=target.device)
    p = probabilities(target(scored, target_cache)[0], params)
    new = verify(guesses, q, p, generator)
    # Roll back: forget the rejected guesses. The last new token is fed next round.
    verified = n - 1 + len(new)
    target_cache.truncate(verified)
    draft_cache.truncate(min(draft_cache.length, verified))
    return new


# --8<-- [end:round]


# --8<-- [start:stats]
@dataclass
class SpeculativeStats:
    """What the draft-then-verify rounds of a run did (each model's prefill is not counted)."""

    target_forwards: int = 0  # one per round: gamma + 1 positions scored at once
    draft_forwards: int = 0  # one per proposed guess
    checked: int = 0  # guesses the target ruled on; those after a rejection are not
    accepted: int = 0

    def record(self, gamma: int, accepted: int) -> None:
        """Count a round that proposed `gamma` guesses and accepted the first `accepted`."""
        self.target_forwards += 1
        self.draft_forwards += gamma
        self.accepted += accepted
        self.checked += accepted + (accepted < gamma)  # plus the rejected guess, if any

    @property
    def acceptance_rate(self) -> float:
        """alpha: the fraction of the guesses the target ruled on that it accepted."""
        if self.checked == 0:
            raise ValueError("no draft token has been checked yet, so alpha is undefined")
        return self.accepted / self.checked

    @property
    def tokens_per_target_forward(self) -> float:
        """Tokens per round: its accepted guesses, plus the one the target adds."""
        if self.target_forwards == 0:
            raise ValueError("no round has run yet")
        return (self.accepted + self.target_forwards) / self.target_forwards

    def __add__(self, other: SpeculativeStats) -> SpeculativeStats:
        """Counts of two runs together."""
        return SpeculativeStats(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self))
        )


# --8<-- [end:stats]


# --8<-- [start:expected]
def expected_tokens_per_forward(alpha: float, gamma: int) -> float:
    """(1 − alpha^(gamma+1)) / (1 − alpha): tokens per round if each guess passes w.p. alpha.

    The round emits its accepted guesses plus one, and guess i is reached only
    if guesses 1 .. i-1 passed: 1 + alpha + alpha² + ... + alpha^gamma.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is an acceptance rate in [0, 1], got {alpha}")
    if gamma < 0:
        raise ValueError(f"gamma (draft tokens per round) must be >= 0, got {gamma}")
    return sum(alpha**i for i in range(gamma + 1))


def expected_speedup(
    alpha: float, gamma: int, cost_ratio: float, verify_cost: float = 1.0
) -> float:
    """Expected wall-clock speedup over target-only decoding (Leviathan et al., Theorem 3.8).

    A round costs gamma draft steps and one target forward over gamma + 1
    tokens. With ``cost_ratio`` c = draft step time / target step time and
    ``verify_cost`` v = target time for gamma + 1 tokens / for one token, the
    speedup is (1 − alpha^(gamma+1)) / ((1 − alpha)(gamma c + v)). The paper
    takes v = 1, true while the target is memory-bound.
    """
    if cost_ratio < 0:
        raise ValueError(f"cost_ratio (draft time / target time) must be >= 0, got {cost_ratio}")
    if verify_cost <= 0:
        raise ValueError(f"verify_cost (a ratio of two times) must be > 0, got {verify_cost}")
    return expected_tokens_per_forward(alpha, gamma) / (gamma * cost_ratio + verify_cost)


# --8<-- [end:expected]


class SpeculativeDecoder:
    """One sequence generated with `target`, `gamma` draft guesses checked per target forward.

    Iterate it for the tokens (like `llmserve_ref.model.generate.generate`, it streams),
    or call `step` for one round at a time. `tokens` is the sequence so far
    (prompt, then output) and `stats` counts the rounds. Repetition, frequency
    and presence penalties are refused: they depend on tokens not yet verified.
    """

    def __init__(
        self,
        target: Llama,
        draft: Llama,
        prompt_ids: Sequence[int],
        params: SamplingParams | None = None,
        gamma: int = 4,
        max_new_tokens: int = 64,
        stop_token_ids: Collection[int] = (),
        generator: torch.Generator | None = None,
    ) -> None:
        params = params or SamplingParams()
        _check_setup(target, draft, prompt_ids, params, gamma, max_new_tokens)
        self.target, self.draft, self.params, self.gamma = target, draft, params, gamma
        self.max_new_tokens, self.stop_token_ids = max_new_tokens, set(stop_token_ids)
        if generator is None and params.seed is not None:
            generator = torch.Generator().manual_seed(params.seed)
        self.generator = generator
        self.tokens = list(prompt_ids)
        self.num_prompt_tokens = len(prompt_ids)
        # The last new token is emitted but never fed, so it needs no cache position.
        max_len = len(prompt_ids) + max_new_tokens - 1
        self.target_cache = target.make_cache(batch_size=1, max_len=max_len)
        self.draft_cache = draft.make_cache(batch_size=1, max_len=max_len)
        self.stats = SpeculativeStats()
        self.done = False

    @property
    def output(self) -> list[int]:
        return self.tokens[self.num_prompt_tokens :]

    def __iter__(self) -> Iterator[int]:
        while not self.done:
            yield from self.step()

    @torch.inference_mode()
    def step(self) -> list[int]:
        """The next tokens: the prefill's one on the first call, then one round's 1 to gamma + 1."""
        if self.done:
            raise RuntimeError("the sequence is finished (stop token or max_new_tokens reached)")
        new = self._round() if self.target_cache.length else self._prefill()
        for i, token in enumerate(new):
            if token in self.stop_token_ids:
                new, self.done = new[: i + 1], True
                break
        self.tokens += new
        self.done = self.done or len(self.output) == self.max_new_tokens
        return new

    def _round(self) -> list[int]:
        gamma = min(self.gamma, self.max_new_tokens - len(self.output) - 1)  # stop at the end
        new = speculative_round(
            self.target,
            self.draft,
            self.target_cache,
            self.draft_cache,
            self.tokens,
            gamma,
            self.params,
            self.generator,
        )
        self.stats.record(gamma, accepted=len(new) - 1)
        return new

    def _prefill(self) -> list[int]:
        """Both models read the prompt; the target's last position gives the first token."""
        prompt = torch.tensor([self.tokens], device=self.target.device)
        p = probabilities(self.target(prompt, self.target_cache)[0, -1], self.params)
        self.draft(prompt, self.draft_cache)  # its guesses start next round
        return [int(sample(p, self.generator))]


def decode_prompts(
    target: Llama,
    draft: Llama,
    prompts: Iterable[Sequence[int]],
    params: SamplingParams,
    gamma: int,
    max_new_tokens: int,
) -> SpeculativeStats:
    """Speculative decoding of each prompt in turn (seeded by ``params.seed``); counts summed."""
    total = SpeculativeStats()
    for prompt_ids in prompts:
        decoder = SpeculativeDecoder(target, draft, prompt_ids, params, gamma, max_new_tokens)
        for _ in decoder:
            pass
        total += decoder.stats
    return total


def forward_steppers(
    model: Llama, context: int, widths: Iterable[int]
) -> dict[int, Callable[[], object]]:
    """For each width w, a call that runs one forward of w new tokens after `context` cached.

    Every call does the same pass, so a call can repeat forever: width 1 is a decode
    step, width gamma + 1 a verification.
    """
    return {width: forward_step(model, 1, context, width) for width in widths}


def _check_setup(
    target: Llama,
    draft: Llama,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    gamma: int,
    max_new_tokens: int,
) -> None:
    vocab = target.config.vocab_size
    if draft.config.vocab_size != vocab:
        raise ValueError(
            f"draft vocabulary ({draft.config.vocab_size}) differs from the target's ({vocab}): "
            "speculative decoding needs both models to share one tokenizer"
        )
    if draft.device != target.device:
        raise ValueError(f"target is on {target.device} but draft on {draft.device}")
    if gamma < 1:
        raise ValueError(f"gamma (draft tokens per round) must be >= 1, got {gamma}")
    limit = min(target.config.max_position_embeddings, draft.config.max_position_embeddings)
    check_prompt(prompt_ids, max_new_tokens, limit, vocab)
    if params.repetition_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
        raise ValueError(
            "speculative decoding here supports temperature, top_k, top_p and min_p; penalties "
            "depend on the tokens generated so far, which include guesses not yet verified"
        )
