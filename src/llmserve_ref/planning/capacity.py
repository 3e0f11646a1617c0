"""Capacity planning: GPUs for a load under latency targets, cost per token, API break-even.

One engine instance here is one GPU serving the whole model (tensor parallelism
is not modelled). Its KV cache is what `kv_math` leaves after the weights, its
step time is `roofline.StepCost`, and the simulator finds the highest arrival
rate it sustains while a share `attainment` of requests meet both latency targets
(TTFT and TPOT). Then

- GPUs for throughput = target rate ÷ sustainable rate per GPU, rounded up;
- GPUs for memory, a lower bound: the KV cache the requests in flight hold
  (Little's law: rate × time in the system, at least the time a request takes
  alone), ÷ one GPU's cache. The simulated rate already respects the cache, so
  this only binds when a GPU's cache cannot hold even unqueued traffic;
- cost per million output tokens = dollars per hour ÷ output tokens per hour;
- break-even: the rate at which one GPU-hour buys as many requests as an API
  charges the same for; above it (and within what a GPU sustains) self-hosting
  is cheaper.

Prices are inputs, never built in.

>>> lengths(200, 0.0), lengths(200, 1.0)
(Fixed(length=200), LogNormal(median=200, sigma=1.0, low=1, high=8000))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llmserve_ref.engine.scheduler import SchedulerConfig
from llmserve_ref.planning.hardware import GPU
from llmserve_ref.planning.kv_math import kv_cache_budget, max_kv_tokens, weight_bytes
from llmserve_ref.planning.model_catalog import CatalogModel
from llmserve_ref.planning.roofline import StepCost
from llmserve_ref.planning.simulator import SLO, Pool, simulate
from llmserve_ref.planning.workload import Fixed, Lengths, LogNormal, generate


def lengths(median: int, sigma: float, high: int = 8000) -> Lengths:
    """All `median` tokens (sigma 0), or a lognormal spread around that median."""
    return Fixed(median) if sigma == 0 else LogNormal(median, sigma, high=high)


# --8<-- [start:instance]
def kv_cache_tokens(
    m: CatalogModel, g: GPU, weight_dtype: str = "bf16", kv_dtype: str = "bf16"
) -> int:
    """Tokens of KV cache one GPU holds beside the weights (vLLM's 90% utilization)."""
    budget = kv_cache_budget(g.memory_bytes, weight_bytes(m.num_parameters, weight_dtype))
    tokens = max_kv_tokens(m.config, budget, kv_dtype)
    if tokens == 0:
        raise ValueError(
            f"{m.name} in {weight_dtype} leaves no room for a KV cache on one "
            f"{g.name}; pick a larger GPU or smaller weights"
        )
    return tokens


def instance_pool(
    m: CatalogModel,
    g: GPU,
    *,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    token_budget: int = 2048,
    max_num_seqs: int = 256,
    block_size: int = 16,
    num_instances: int = 1,
) -> Pool:
    """One-GPU instances: KV blocks sized from memory, step times from the roofline."""
    num_blocks = kv_cache_tokens(m, g, weight_dtype, kv_dtype) // block_size
    config = SchedulerConfig(
        token_budget=token_budget,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_blocks=num_blocks,
    )
    return Pool(config, StepCost(m, g, weight_dtype, kv_dtype), num_instances)


# --8<-- [end:instance]


# --8<-- [start:sustainable]
@dataclass(frozen=True)
class Load:
    """Requests per second and their prompt and output lengths."""

    rate: float
    prompt_len: Lengths
    output_len: Lengths
    burstiness: float = 1.0

    def workload(self, rate: float, num_requests: int, seed: int = 0):
        return generate(
            num_requests,
            rate,
            self.prompt_len,
            self.output_len,
            burstiness=self.burstiness,
            seed=seed,
        )


def sustainable_rate(
    pool: Pool,
    load: Load,
    slo: SLO,
    *,
    attainment: float = 0.9,
    num_requests: int = 400,
    seed: int = 0,
    rel_tolerance: float = 0.02,
) -> float:
    """The highest arrival rate at which `attainment` of requests meet `slo`, by bisection.

    Zero when even an idle pool misses the targets. The same seeded requests are
    replayed at every rate, so the search is deterministic.
    """

    def meets(rate: float) -> bool:
        result = simulate(load.workload(rate, num_requests, seed), pool)
        return result.attainment(slo) >= attainment

    offline = simulate(load.workload(math.inf, num_requests, seed), pool)
    high = 2 * offline.request_throughput()  # no rate above what a full queue drains
    low = high / 2**12
    if not meets(low):
        return 0.0
    while high - low > rel_tolerance * low:
        middle = (low + high) / 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return low


# --8<-- [end:sustainable]


# --8<-- [start:plan]
@dataclass(frozen=True)
class Plan:
    sustainable_rate_per_gpu: float
    gpus_for_throughput: int
    gpus_for_memory: int
    dollars_per_hour: float
    cost_per_million_output_tokens: float
    api_dollars_per_hour: float
    breakeven_rate: float  # requests/s at which one GPU-hour costs what the API charges

    @property
    def gpus(self) -> int:
        return max(self.gpus_for_throughput, self.gpus_for_memory)


def plan(
    m: CatalogModel,
    g: GPU,
    load: Load,
    slo: SLO,
    *,
    gpu_hour_price: float,
    api_price_per_million: tuple[float, float],
    attainment: float = 0.9,
    **pool_options,
) -> Plan:
    """GPUs for `load` under `slo`, and what they cost against an API's (input, output) prices."""
    pool = instance_pool(m, g, **pool_options)
    memory_options = {k: v for k, v in pool_options.items() if k in ("weight_dtype", "kv_dtype")}
    per_gpu = sustainable_rate(pool, load, slo, attainment=attainment)
    if per_gpu == 0:
        raise ValueError(
            f"one {g.name} misses these latency targets even when idle; "
            "relax the SLO or pick a faster GPU"
        )
    sample = load.workload(load.rate, 10_000, seed=1)
    mean_prompt = float(np.mean([r.prompt_len for r in sample]))
    mean_output = float(np.mean([r.output_len for r in sample]))
    # Little's law: requests in flight = rate × time in the system, at least the time a
    # request takes alone; over its life a request holds its prompt and half its output.
    alone = pool.cost.step_time(round(mean_prompt), 0, round(mean_prompt) ** 2 // 2) + (
        mean_output - 1
    ) * pool.cost.step_time(1, round(mean_prompt + mean_output / 2), 0)
    kv_in_flight = load.rate * alone * (mean_prompt + mean_output / 2)
    gpus_for_memory = math.ceil(kv_in_flight / kv_cache_tokens(m, g, **memory_options))
    gpus_for_throughput = math.ceil(load.rate / per_gpu)
    gpus = max(gpus_for_throughput, gpus_for_memory)
    price_in, price_out = api_price_per_million
    api_per_request = (mean_prompt * price_in + mean_output * price_out) / 1e6
    return Plan(
        sustainable_rate_per_gpu=per_gpu,
        gpus_for_throughput=gpus_for_throughput,
        gpus_for_memory=gpus_for_memory,
        dollars_per_hour=gpus * gpu_hour_price,
        cost_per_million_output_tokens=gpus
        * gpu_hour_price
        / (load.rate * mean_output * 3600)
        * 1e6,
        api_dollars_per_hour=load.rate * 3600 * api_per_request,
        breakeven_rate=gpu_hour_price / (3600 * api_per_request),
    )


# --8<-- [end:plan]
