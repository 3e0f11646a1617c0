"""Samplers: how next-token logits become the next token.

The model gives one logit per vocabulary entry. Decoding strategies are small
functions that reshape those logits before one token is drawn:

* `logit_bias` adds a fixed amount to chosen tokens' logits (OpenAI's field), and
  `min_tokens` bans the stop tokens until that many tokens are out (vLLM's);
* penalties push down tokens already seen: `repetition_penalty` (the CTRL /
  Hugging Face rule: divide a positive logit, multiply a negative one) and
  `frequency_presence_penalty` (OpenAI's rule: subtract ``count × frequency``
  plus ``presence`` if seen at all);
* `temperature` divides logits by T: below 1 sharpens, above 1 flattens, and
  T = 0 means greedy (only the argmax survives);
* truncation keeps a plausible set and masks the rest to ``-inf``: `top_k`
  (the k largest), `top_p` (the smallest set whose probability reaches p,
  "nucleus"), `min_p` (tokens at least ``min_p × p_max`` likely).

Every function takes logits of shape ``[..., vocab]`` and returns new logits of
the same shape; none modifies its input. `process_logits` applies them in
vLLM 0.32.0's order (its V1 sampler, ``vllm/v1/sample/sampler.py``): min-tokens
and logit bias, penalties, temperature, min-p, then top-k and top-p. Hugging Face
transformers and vLLM's older V0 sampler apply min-p last instead, which keeps more
tokens when top-p is also set. `sample` draws from the resulting distribution with
a `torch.Generator`, so the same seed gives the same tokens; `token_logprobs` says
how likely the model found the token drawn (the API's ``logprobs``). Ties follow
one rule everywhere: a token tied with the last one kept by top-k or min-p is kept
too; top-p and greedy break ties by the lower token id.

>>> import torch
>>> logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
>>> top_k(logits, 2)
tensor([2., 1., -inf, -inf])
>>> greedy(logits)
tensor(0)
>>> params = SamplingParams(temperature=0.8, top_p=0.9, seed=0)
>>> probs = torch.softmax(process_logits(logits, params), dim=-1)
>>> probs
tensor([0.6945, 0.1990, 0.1065, 0.0000])
>>> g = torch.Generator().manual_seed(params.seed)
>>> [int(sample(probs, g)) for _ in range(8)]
[0, 0, 0, 0, 0, 0, 0, 1]
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import torch

NEG_INF = float("-inf")
MAX_TEMPERATURE = 2.0  # vLLM 0.32 and OpenAI refuse a higher temperature
MIN_TEMPERATURE = 0.01  # a lower positive one samples as this (see `temperature`)
MAX_LOGPROBS = 20  # top logprobs per token: OpenAI's chat limit, vLLM's default max_logprobs


class SamplingParamError(ValueError):
    """A sampling parameter out of its range. `field` names it, so that a caller (the
    server's error body, say) can point at the field without reading the message."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field


# --8<-- [start:params]
@dataclass(frozen=True)
class SamplingParams:
    """Every knob of the sampler, checked when made. The defaults sample the model as is."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    logit_bias: Mapping[int, float] | None = None  # token id -> added to its logit
    min_tokens: int = 0  # no stop token before this many tokens
    logprobs: int | None = None  # report the token's logprob and this many top ones

    def __post_init__(self) -> None:
        _check_temperature(self.temperature)
        if self.top_k is not None:
            _check_top_k(self.top_k)
        _check_top_p(self.top_p)
        _check_min_p(self.min_p)
        _check_repetition_penalty(self.repetition_penalty)
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            if not -2.0 <= value <= 2.0:
                raise SamplingParamError(
                    name, f"must be between -2.0 and 2.0 (OpenAI's range), got {value}"
                )
        for token, bias in (self.logit_bias or {}).items():
            if token < 0 or not -100.0 <= bias <= 100.0:
                raise SamplingParamError(
                    "logit_bias",
                    f"maps token ids (>= 0) to a bias in [-100, 100] (OpenAI's range), got "
                    f"{token}: {bias}",
                )
        if self.min_tokens < 0:
            raise SamplingParamError("min_tokens", f"must be >= 0, got {self.min_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise SamplingParamError(
                "logprobs",
                f"must be in [0, {MAX_LOGPROBS}] top tokens (vLLM's default max_logprobs), "
                f"got {self.logprobs}",
            )

    def check_vocab(self, vocab_size: int) -> None:
        """Refuse a `logit_bias` on a token id the model does not have."""
        outside = sorted(t for t in self.logit_bias or {} if t >= vocab_size)
        if outside:
            raise SamplingParamError(
                "logit_bias", f"has token ids outside the vocabulary [0, {vocab_size}): {outside}"
            )


# --8<-- [end:params]


def _check_temperature(t: float) -> None:
    if not 0 <= t <= MAX_TEMPERATURE:  # NaN fails this too
        raise SamplingParamError(
            "temperature",
            f"must be in [0, {MAX_TEMPERATURE:g}] (0 means greedy; vLLM's range), got {t}",
        )


def _check_top_k(k: int) -> None:
    if k < 1:
        raise SamplingParamError(
            "top_k", f"must be an integer >= 1 (use None to disable it), got {k}"
        )


def _check_top_p(p: float) -> None:
    if not 0.0 < p <= 1.0:
        raise SamplingParamError("top_p", f"must be in (0, 1] (1.0 keeps every token), got {p}")


def _check_min_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise SamplingParamError("min_p", f"must be in [0, 1] (0.0 keeps every token), got {p}")


def _check_repetition_penalty(penalty: float) -> None:
    if not 0 < penalty < math.inf:  # NaN fails this too
        raise SamplingParamError(
            "repetition_penalty", f"must be > 0 (1.0 means no penalty), got {penalty}"
        )


# --8<-- [start:greedy]
def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The id of the largest logit (the lowest such id on a tie)."""
    return logits.argmax(dim=-1)


# --8<-- [end:greedy]


# --8<-- [start:temperature]
def temperature(logits: torch.Tensor, t: float) -> torch.Tensor:
    """Logits divided by `t`. ``t = 0`` keeps only the greedy token, the limit as t → 0."""
    _check_temperature(t)
    if t == 0:
        keep = torch.zeros_like(logits, dtype=torch.bool)
        keep.scatter_(-1, greedy(logits).unsqueeze(-1), True)
        return logits.masked_fill(~keep, NEG_INF)
    # A tiny T overflows float32 logits to inf and the softmax to NaN: like vLLM 0.32
    # (`_MAX_TEMP` in vllm/sampling_params.py), treat any T below 0.01 as 0.01.
    return logits / max(t, MIN_TEMPERATURE)


# --8<-- [end:temperature]


# --8<-- [start:top_k]
def top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the `k` largest logits (and any tied with the k-th); mask the rest."""
    _check_top_k(k)
    if k >= logits.shape[-1]:
        return logits
    kth_largest = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth_largest, NEG_INF)


# --8<-- [end:top_k]


# --8<-- [start:top_p]
def top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most likely tokens until their probability reaches `p`; mask the rest.

    A token is kept if the tokens ranked above it hold less than `p` in total,
    so the most likely token is always kept and ``p = 1.0`` keeps all.
    """
    _check_top_p(p)
    if p == 1.0:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
    probs = sorted_logits.softmax(dim=-1)
    mass_above = probs.cumsum(dim=-1) - probs
    remove_sorted = mass_above >= p
    remove = remove_sorted.scatter(-1, order, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


# --8<-- [end:top_p]


# --8<-- [start:min_p]
def min_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep tokens whose probability is at least `p` times the top token's; mask the rest."""
    _check_min_p(p)
    probs = logits.softmax(dim=-1)
    threshold = p * probs.amax(dim=-1, keepdim=True)
    return logits.masked_fill(probs < threshold, NEG_INF)


# --8<-- [end:min_p]


# --8<-- [start:repetition_penalty]
def repetition_penalty(
    logits: torch.Tensor, token_ids: torch.Tensor, penalty: float
) -> torch.Tensor:
    """CTRL's penalty on every token in `token_ids` (prompt and output so far).

    A seen token's logit is divided by `penalty` if positive and multiplied by
    it if negative, so ``penalty > 1`` always makes it less likely.
    """
    _check_repetition_penalty(penalty)
    if token_ids.numel() == 0:
        return logits
    seen = logits.gather(-1, token_ids)
    seen = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, token_ids, seen)


# --8<-- [end:repetition_penalty]


# --8<-- [start:frequency_presence_penalty]
def frequency_presence_penalty(
    logits: torch.Tensor, output_ids: torch.Tensor, frequency: float, presence: float
) -> torch.Tensor:
    """OpenAI's penalties on tokens already generated (the prompt does not count).

    ``logit - count × frequency - (count > 0) × presence``, where count is how
    often the token occurs in `output_ids`.
    """
    counts = torch.zeros_like(logits).scatter_add(
        -1, output_ids, torch.ones_like(output_ids, dtype=logits.dtype)
    )
    return logits - counts * frequency - (counts > 0).to(logits.dtype) * presence


# --8<-- [end:frequency_presence_penalty]


def logit_bias(logits: torch.Tensor, bias: Mapping[int, float]) -> torch.Tensor:
    """OpenAI's ``logit_bias``: add each listed token's bias to its logit.

    A bias of -100 all but bans a token and +100 all but forces it; small ones nudge.
    """
    ids = torch.tensor(list(bias), dtype=torch.long, device=logits.device)
    values = torch.tensor(list(bias.values()), dtype=logits.dtype, device=logits.device)
    return logits.index_add(-1, ids, values.expand(*logits.shape[:-1], len(bias)))


def min_tokens(
    logits: torch.Tensor, num_output: int, minimum: int, stop_token_ids: Collection[int]
) -> torch.Tensor:
    """Ban the stop tokens while fewer than `minimum` tokens have been generated."""
    if num_output >= minimum or not stop_token_ids:
        return logits
    ids = torch.tensor(sorted(stop_token_ids), dtype=torch.long, device=logits.device)
    return logits.index_fill(-1, ids, NEG_INF)


# --8<-- [start:process_logits]
def process_logits(
    logits: torch.Tensor,
    params: SamplingParams,
    prompt_ids: torch.Tensor | None = None,
    output_ids: torch.Tensor | None = None,
    stop_token_ids: Collection[int] = (),
) -> torch.Tensor:
    """Apply every sampler `params` asks for to `logits`, in vLLM 0.32.0's order.

    `min_tokens` (it bans `stop_token_ids`) and `logit_bias` first, then penalties,
    then temperature, then min-p, then top-k, then top-p, as vLLM's V1 `Sampler`
    does: the first two are its logits processors that can change the argmax, so
    they run before greedy picks; min-p is its built-in argmax-invariant one, run
    after temperature and before `TopKTopPSampler`. Min-p before top-p matters:
    top-p then measures its mass among the tokens min-p kept.
    """
    empty = torch.zeros((*logits.shape[:-1], 0), dtype=torch.long, device=logits.device)
    prompt_ids = empty if prompt_ids is None else prompt_ids
    output_ids = empty if output_ids is None else output_ids
    logits = min_tokens(logits, output_ids.shape[-1], params.min_tokens, stop_token_ids)
    if params.logit_bias:
        logits = logit_bias(logits, params.logit_bias)
    if params.repetition_penalty != 1.0:
        seen = torch.cat((prompt_ids, output_ids), dim=-1)
        logits = repetition_penalty(logits, seen, params.repetition_penalty)
    if params.frequency_penalty or params.presence_penalty:
        logits = frequency_presence_penalty(
            logits, output_ids, params.frequency_penalty, params.presence_penalty
        )
    logits = temperature(logits, params.temperature)
    if params.min_p > 0:
        logits = min_p(logits, params.min_p)
    if params.top_k is not None:
        logits = top_k(logits, params.top_k)
    return top_p(logits, params.top_p)


# --8<-- [end:process_logits]


# --8<-- [start:sample]
def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token id from each distribution in `probs` (``[..., vocab]``)."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1])


# --8<-- [end:sample]


# --8<-- [start:next_token]
def next_token(
    logits: torch.Tensor,
    params: SamplingParams,
    prompt_ids: Sequence[int] = (),
    output_ids: Sequence[int] = (),
    generator: torch.Generator | None = None,
    stop_token_ids: Collection[int] = (),
) -> int:
    """The next token of one sequence from its logits ``[1, vocab]``: every sampler, then a pick.

    The one home of logits-to-token for a single sequence (`generate` and the engines).
    Greedy at temperature 0 (no randomness used), else one draw with `generator`.
    """
    prompt, output = (
        torch.tensor([list(ids)], dtype=torch.long, device=logits.device)
        for ids in (prompt_ids, output_ids)
    )
    logits = process_logits(logits.float(), params, prompt, output, stop_token_ids)
    if params.temperature == 0:
        return int(greedy(logits)[0])
    return int(sample(logits.softmax(dim=-1), generator)[0])


# --8<-- [end:next_token]


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """How likely the model found a sampled token, and the most likely tokens at its place."""

    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), most likely first


def token_logprobs(
    logits: torch.Tensor, token_ids: Sequence[int], num_top: Sequence[int]
) -> list[TokenLogprobs]:
    """Row i's logprob of ``token_ids[i]`` and its ``num_top[i]`` most likely tokens.

    These are the model's own log-probabilities, ``log_softmax`` of the raw logits,
    before any sampler reshaped them: vLLM 0.32's default (``logprobs_mode=
    "raw_logprobs"``, computed first thing in its V1 ``Sampler.forward``). So
    temperature, top-p or a logit bias never change them, and a greedy token's
    logprob is the model's. One ``topk`` serves every row.
    """
    # equivalent mutants: logits are 2-D (gather with [n, 1] ids needs it): dim=1 is dim=-1
    logprobs = logits.float().log_softmax(dim=-1)  # pragma: no mutate
    ids = torch.tensor(token_ids, dtype=torch.long, device=logits.device)[:, None]
    # equivalent mutants: logprobs are 2-D: dim 1 is dim -1
    chosen = logprobs.gather(-1, ids)[:, 0].tolist()  # pragma: no mutate
    # equivalent mutants: 2-D: dim=1 is the default dim=-1; num_top empty means no rows to read
    top = logprobs.topk(max(num_top, default=0), dim=-1)  # pragma: no mutate
    values, top_ids = top.values.tolist(), top.indices.tolist()
    return [
        TokenLogprobs(
            # equivalent mutants: top_ids[i][:k] and values[i][:k] have one length by construction
            lp,
            tuple(zip(top_ids[i][:k], values[i][:k], strict=True)),  # pragma: no mutate
        )
        for i, (lp, k) in enumerate(zip(chosen, num_top, strict=True))
    ]
