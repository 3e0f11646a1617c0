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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request of a workload: when it arrives, its prompt tokens, the tokens it generates."""

    request_id: str
    arrival_time: float
    prompt_len: int
    output_len: int


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
