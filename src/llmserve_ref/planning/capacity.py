"""Capacity planning: GPUs for a load under latency targets, cost per token, API break-even.

One engine instance here is one GPU serving the whole model (tensor parallelism
is not modelled). Its KV cache is what `kv_math` leaves after the weights, its
step time is `roofline.StepCost`, and the simulator finds the highest arrival
rate it sustains while a share `attainment` of requests meet both latency targets
(TTFT and TPOT). Then

- GPUs for throughput = peak rate ÷ sustainable rate per GPU, rounded up;
- GPUs for memory, a lower bound: the KV cache the requests in flight hold
  (Little's law: rate × time in the system, at least the time a request takes
  alone), ÷ one GPU's cache. The simulated rate already respects the cache, so
  this only binds when a GPU's cache cannot hold even unqueued traffic;
- cost per million output tokens = dollars per hour ÷ output tokens per hour, at
  the average rate: GPUs sized for a peak sit partly idle the rest of the time;
- break-even: the average rate per GPU at which one GPU-hour buys as many requests
  as an API charges the same for; above it (and within what a GPU sustains)
  self-hosting is cheaper.

Step times are the roofline's scaled by an `Efficiency`: `plan` assumes
`roofline.VLLM_H100`, what vLLM measured on an H100, unless given another, because
a plan at 100% of the datasheet buys too few GPUs. `implied_efficiency` derives
such factors from published benchmarks. Prices are inputs, never built in.

>>> lengths(200, 0.0), lengths(200, 1.0)
(Fixed(length=200), LogNormal(median=200, sigma=1.0, low=1, high=8000))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.hardware import GPU
from llmserve_ref.planning.kv_math import kv_cache_budget, max_kv_tokens, weight_bytes
from llmserve_ref.planning.model_catalog import CatalogModel
from llmserve_ref.planning.roofline import ROOFLINE, VLLM_H100, Efficiency, StepCost
from llmserve_ref.planning.simulator import Pool, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import Fixed, Lengths, LogNormal, sample_workload


def lengths(median: int, sigma: float, high: int = 8000) -> Lengths:
    """All `median` tokens (sigma 0), or a lognormal spread around that median."""
    return Fixed(median) if sigma == 0 else LogNormal(median, sigma, high=high)


# --8<-- [start:instance]
def kv_cache_tokens(
    m: CatalogModel, g: GPU, weight_dtype: str = "bf16", kv_dtype: str = "bf16"
) -> int:
    """Tokens of KV cache one GPU holds beside the weights, at vLLM's default utilization."""
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
    efficiency: Efficiency = ROOFLINE,
) -> Pool:
    """One-GPU instances: KV blocks sized from memory, step times from the roofline.

    `efficiency` defaults to the roofline (the datasheet's peaks); pass
    `roofline.VLLM_H100` for step times a real engine reaches.
    """
    num_blocks = kv_cache_tokens(m, g, weight_dtype, kv_dtype) // block_size
    config = SchedulerConfig(
        token_budget=token_budget,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        num_blocks=num_blocks,
    )
    return Pool(config, StepCost(m, g, weight_dtype, kv_dtype, efficiency), num_instances)


# --8<-- [end:instance]


# --8<-- [start:calibrate]
@dataclass(frozen=True)
class Benchmark:
    """An offline throughput run: every prompt submitted at once, as `vllm bench throughput` does.

    `total_tokens_per_s` is what the engine reported: prompt and output tokens over
    the run's wall time.
    """

    num_prompts: int
    input_len: int
    output_len: int
    total_tokens_per_s: float = math.nan

    @property
    def total_tokens(self) -> int:
        return self.num_prompts * (self.input_len + self.output_len)

    def workload(self):
        return sample_workload(
            self.num_prompts, math.inf, Fixed(self.input_len), Fixed(self.output_len)
        )


@dataclass
class _Recorder:
    """A cost model that notes each step's compute and memory time at the datasheet's peaks."""

    cost: StepCost
    compute: list[float]
    memory: list[float]

    def step_time(self, num_tokens: int, kv_tokens_read: int, attention_pairs: int) -> float:
        self.compute.append(self.cost.compute_time(num_tokens, attention_pairs))
        self.memory.append(self.cost.memory_time(num_tokens, kv_tokens_read))
        return max(self.compute[-1], self.memory[-1])


@dataclass(frozen=True)
class Run:
    """A benchmark simulated once: each step's compute and memory seconds at 100%."""

    benchmark: Benchmark
    compute: np.ndarray
    memory: np.ndarray

    def duration(self, efficiency: Efficiency) -> float:
        """The run's time when each step takes max(compute ÷ MFU, memory ÷ MBU)."""
        return float(np.maximum(self.compute / efficiency.mfu, self.memory / efficiency.mbu).sum())

    def total_tokens_per_s(self, efficiency: Efficiency) -> float:
        return self.benchmark.total_tokens / self.duration(efficiency)


def simulate_benchmark(benchmark: Benchmark, m: CatalogModel, g: GPU, **pool_options) -> Run:
    """Simulate `benchmark` on one GPU once, keeping each step's compute and memory time.

    Every request waits from time zero, so which tokens each step runs does not
    depend on how long steps take: one simulation prices the run at any efficiency.
    """
    pool = instance_pool(m, g, efficiency=ROOFLINE, **pool_options)
    assert isinstance(pool.cost, StepCost)  # what instance_pool builds
    recorder = _Recorder(pool.cost, [], [])
    simulate(benchmark.workload(), Pool(pool.config, recorder))
    return Run(benchmark, np.array(recorder.compute), np.array(recorder.memory))


def implied_efficiency(prefill: Run, decode: Run) -> Efficiency:
    """The MFU and MBU at which a prefill-bound and a decode-bound run take their measured time.

    The decode-bound run pins the MBU, the prefill-bound one the MFU: each is found
    by bisection with the other held, and the pair is iterated to agreement.
    """

    def solve(field: str, run: Run, other: Efficiency) -> float:
        measured = run.benchmark.total_tokens / run.benchmark.total_tokens_per_s
        low, high = 1e-3, 1.0
        for _ in range(50):  # the run's time falls as the efficiency rises
            middle = (low + high) / 2
            slow = run.duration(replace(other, **{field: middle})) > measured
            low, high = (middle, high) if slow else (low, middle)
        return (low + high) / 2

    efficiency = ROOFLINE
    for _ in range(10):
        efficiency = replace(efficiency, mbu=solve("mbu", decode, efficiency))
        efficiency = replace(efficiency, mfu=solve("mfu", prefill, efficiency))
    return efficiency


# --8<-- [end:calibrate]


# --8<-- [start:sustainable]
@dataclass(frozen=True)
class Load:
    """Requests per second and their prompt and output lengths."""

    rate: float
    prompt_len: Lengths
    output_len: Lengths
    burstiness: float = 1.0

    def workload(self, rate: float, num_requests: int, seed: int = 0):
        return sample_workload(
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
    replayed at every rate, so the search is deterministic. A replay of
    `num_requests` ends before a queue that grows slowly has grown much, so for
    steady traffic the rate found is an upper bound: check a plan with a longer
    replay (the cost-and-capacity page does).
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
    """GPUs for a load and what they cost, beside an API's per-token prices.

    The GPUs are sized for `peak_rate` and priced at the average `rate`. `at`
    re-sizes and re-prices for other rates with the same lengths and targets,
    without simulating again.
    """

    sustainable_rate_per_gpu: float
    kv_tokens_per_unit_rate: float  # KV tokens in flight per request/s (Little's law)
    kv_tokens_per_gpu: int
    rate: float
    peak_rate: float
    mean_prompt_len: float
    mean_output_len: float
    gpu_hour_price: float
    api_dollars_per_request: float

    def at(self, rate: float, peak_rate: float | None = None):  # -> Plan, pages run unpostponed
        """This plan for another average rate, sized for `peak_rate` (default: that average)."""
        return replace(self, rate=rate, peak_rate=rate if peak_rate is None else peak_rate)

    @property
    def gpus_for_throughput(self) -> int:
        return math.ceil(self.peak_rate / self.sustainable_rate_per_gpu)

    @property
    def gpus_for_memory(self) -> int:
        return math.ceil(self.peak_rate * self.kv_tokens_per_unit_rate / self.kv_tokens_per_gpu)

    @property
    def gpus(self) -> int:
        return max(self.gpus_for_throughput, self.gpus_for_memory)

    @property
    def dollars_per_hour(self) -> float:
        return self.gpus * self.gpu_hour_price

    @property
    def utilization(self) -> float:
        """The average rate over what the GPUs sustain together."""
        return self.rate / (self.gpus * self.sustainable_rate_per_gpu)

    @property
    def cost_per_million_output_tokens(self) -> float:
        return self.dollars_per_hour / (self.rate * self.mean_output_len * 3600) * 1e6

    @property
    def api_dollars_per_hour(self) -> float:
        return self.rate * 3600 * self.api_dollars_per_request

    @property
    def breakeven_rate(self) -> float:
        """Average requests/s per GPU at which a GPU-hour costs what the API charges for them."""
        return self.gpu_hour_price / (3600 * self.api_dollars_per_request)

    @property
    def breakeven_utilization(self) -> float:
        return self.breakeven_rate / self.sustainable_rate_per_gpu


def plan(
    m: CatalogModel,
    g: GPU,
    load: Load,
    slo: SLO,
    *,
    gpu_hour_price: float,
    api_price_per_million: tuple[float, float],
    peak_rate: float | None = None,
    attainment: float = 0.9,
    efficiency: Efficiency = VLLM_H100,
    **pool_options,
) -> Plan:
    """GPUs for `load` under `slo`, and what they cost against an API's (input, output) prices.

    `load.rate` is the average; the GPUs are sized for `peak_rate` (default: the
    average). Step times assume `efficiency`, by default what vLLM measured on an H100.
    """
    pool = instance_pool(m, g, efficiency=efficiency, **pool_options)
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
    price_in, price_out = api_price_per_million
    return Plan(
        sustainable_rate_per_gpu=per_gpu,
        kv_tokens_per_unit_rate=alone * (mean_prompt + mean_output / 2),
        kv_tokens_per_gpu=kv_cache_tokens(m, g, **memory_options),
        rate=load.rate,
        peak_rate=load.rate if peak_rate is None else peak_rate,
        mean_prompt_len=mean_prompt,
        mean_output_len=mean_output,
        gpu_hour_price=gpu_hour_price,
        api_dollars_per_request=(mean_prompt * price_in + mean_output * price_out) / 1e6,
    )


# --8<-- [end:plan]
