"""Synthetic serving workloads: when requests arrive and how long they are, from a seed.

Arrivals are a renewal process with gamma-distributed gaps of mean `1 / rate`.
`burstiness` is the gamma shape, as in vLLM's `benchmark_serving.py`: 1 gives a
Poisson process (exponential gaps), below 1 requests come in clumps with long
quiet spells between them, above 1 they come more evenly spaced. The squared
coefficient of variation of the gaps is `1 / burstiness`. An infinite rate puts
every request at time zero: an offline batch.

Lengths come from a `Lengths` distribution: `Fixed`, `Uniform`, or `LogNormal`,
a heavy tail clipped to a range, the shape that prompt and output lengths of
chat traces tend to have (many short, a few very long).

>>> w = sample_workload(3, rate=2.0, prompt_len=Fixed(100), output_len=Uniform(10, 20), seed=0)
>>> [(r.request_id, round(r.arrival_time, 2), r.prompt_len, r.output_len) for r in w]
[('0', 0.34, 100, 10), ('1', 0.85, 100, 10), ('2', 0.86, 100, 11)]

Requests may also carry token ids, so that a prefix cache can find what they share:
`with_system_prompts` puts each prompt behind one of a few named system prompts, and
`conversations` makes multi-turn chats, each turn's prompt the whole conversation so far.
The ids are random draws from a vocabulary, the same for the same name and seed: only
equality matters to a cache.

>>> chat = conversations(1, turns=2, rate=1.0, system_len=4, question_len=Fixed(2),
...                      answer_len=Fixed(3), think_time=5.0, seed=0)
>>> [(r.prefix, r.prompt_len, r.output_len) for r in chat]
[('conversation-0', 6, 3), ('conversation-0', 11, 3)]
>>> chat[1].token_ids[:9] == chat[0].token_ids  # turn 2 resends turn 1 and its answer
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload: when it arrives, its prompt tokens, the tokens it generates.

    Optionally: `token_ids`, the prompt's ids followed by the answer's (a prefix cache
    shares what requests have in common), `prefix`, the name of the shared prefix it
    starts with, and `max_tokens`, what the client asks for (default `output_len`): a
    request with a larger `max_tokens` stops at its end-of-sequence token, after
    `output_len` tokens, as most real answers stop short of their limit.
    """

    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int
    token_ids: tuple[int, ...] | None = None
    prefix: str | None = None
    max_tokens: int | None = None


# --8<-- [start:lengths]
class Lengths(Protocol):
    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray: ...


@dataclass(frozen=True)
class Fixed:
    """Every request the same length."""

    length: int

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.length, dtype=np.int64)


@dataclass(frozen=True)
class Uniform:
    """Lengths uniform in [low, high]."""

    low: int
    high: int

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.integers(self.low, self.high, size=size, endpoint=True)


@dataclass(frozen=True)
class LogNormal:
    """A heavy tail: exp of a normal with this median and `sigma`, rounded, clipped to [low, high].

    The mean before clipping is `median × exp(sigma² / 2)`: sigma 1 puts it at
    1.65 times the median, and one request in a hundred above 10 times it.
    """

    median: float
    sigma: float
    low: int = 1
    high: int = 32768

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        draws = rng.lognormal(math.log(self.median), self.sigma, size=size)
        return np.clip(np.rint(draws), self.low, self.high).astype(np.int64)


# --8<-- [end:lengths]


# --8<-- [start:sample_workload]
def arrival_times(
    num_requests: int, rate: float, burstiness: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times of a gamma renewal process with `rate` requests/s (`inf`: all at 0)."""
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"rate and burstiness must be positive, got {rate} and {burstiness}")
    if math.isinf(rate):
        return np.zeros(num_requests)
    gaps = rng.gamma(shape=burstiness, scale=1 / (rate * burstiness), size=num_requests)
    return np.cumsum(gaps)


def sample_workload(
    num_requests: int,
    rate: float,
    prompt_len: Lengths,
    output_len: Lengths,
    *,
    burstiness: float = 1.0,
    seed: int = 0,
) -> list[RequestSpec]:
    """`num_requests` requests, the same ones for the same arguments and seed."""
    rng = np.random.default_rng(seed)
    times = arrival_times(num_requests, rate, burstiness, rng)
    prompts = prompt_len.sample(rng, num_requests)
    outputs = output_len.sample(rng, num_requests)
    if num_requests and min(prompts.min(), outputs.min()) < 1:
        raise ValueError("every prompt and output must be at least one token; raise `low`")
    return [
        RequestSpec(str(i), float(t), int(p), int(o))
        for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))
    ]


# --8<-- [end:sample_workload]


# --8<-- [start:shared_prefixes]
VOCAB_SIZE = 32000  # the synthetic token ids are drawn from range(VOCAB_SIZE)


def _draw(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    return tuple(rng.integers(0, VOCAB_SIZE, size=n).tolist())


def with_system_prompts(
    workload: Sequence[RequestSpec],
    num_prompts: int,
    system_len: int,
    *,
    popularity: float = 0.0,
    seed: int = 0,
) -> list[RequestSpec]:
    """`workload` with each prompt put behind one of `num_prompts` system prompts
    ("system-0", ...) of `system_len` tokens, system-k picked with weight 1 / (k + 1) **
    `popularity` (0: all alike; 1: Zipf, a few prompts carry most of the traffic).

    >>> two = with_system_prompts(sample_workload(2, 1.0, Fixed(5), Fixed(2)), 1, system_len=8)
    >>> [(r.prefix, r.prompt_len) for r in two], two[0].token_ids[:8] == two[1].token_ids[:8]
    ([('system-0', 13), ('system-0', 13)], True)
    """
    rng = np.random.default_rng(seed)
    systems = [_draw(rng, system_len) for _ in range(num_prompts)]
    weights = 1 / np.arange(1, num_prompts + 1) ** popularity
    picks = rng.choice(num_prompts, size=len(workload), p=weights / weights.sum())
    return [
        replace(
            r,
            prompt_len=system_len + r.prompt_len,
            token_ids=systems[k] + _draw(rng, r.prompt_len + r.output_len),
            prefix=f"system-{k}",
        )
        for r, k in zip(workload, picks.tolist(), strict=True)
    ]


def conversations(
    num_conversations: int,
    turns: int,
    rate: float,
    *,
    system_len: int,
    question_len: Lengths,
    answer_len: Lengths,
    think_time: float,
    num_system_prompts: int = 1,
    seed: int = 0,
) -> list[RequestSpec]:
    """Multi-turn chats ("conversation-0", ...), started at `rate` per second (Poisson).

    Each starts with one of `num_system_prompts` system prompts (in turn), and turn t
    arrives `think_time` seconds after turn t - 1. Its prompt is the conversation so
    far, every earlier question and answer, then a new question: a chat API resends it
    all. Requests are sorted by arrival time; ids are "conversation-turn".
    """
    rng = np.random.default_rng(seed)
    systems = [_draw(rng, system_len) for _ in range(num_system_prompts)]
    starts = arrival_times(num_conversations, rate, 1.0, rng)
    requests = []
    for c, start in enumerate(starts.tolist()):
        history = systems[c % num_system_prompts]
        questions = question_len.sample(rng, turns).tolist()
        answers = answer_len.sample(rng, turns).tolist()
        for t, (q, a) in enumerate(zip(questions, answers, strict=True)):
            prompt = history + _draw(rng, q)
            history = prompt + _draw(rng, a)
            requests.append(
                RequestSpec(
                    f"{c}-{t}", start + t * think_time, len(prompt), a, history, f"conversation-{c}"
                )
            )
    return sorted(requests, key=lambda r: r.arrival_time)


# --8<-- [end:shared_prefixes]
