"""Capacity planning: the sustainable rate is a real threshold; the plan's arithmetic adds up."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import pytest

from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.capacity import (
    Benchmark,
    Load,
    implied_efficiency,
    instance_pool,
    kv_cache_tokens,
    lengths,
    plan,
    simulate_benchmark,
)
from llmserve_ref.planning.capacity import sustainable_rate as find_rate
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import ROOFLINE, VLLM_H100, Efficiency
from llmserve_ref.planning.simulator import Pool, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import Fixed

LLAMA, H100 = model("Llama-3.1-8B"), gpu("H100-SXM")


@dataclass(frozen=True)
class LinearCost:
    fixed: float = 0.010
    per_token: float = 1e-4

    def step_time(self, num_tokens: int, kv_tokens_read: int, attention_pairs: int) -> float:
        return self.fixed + self.per_token * num_tokens


def test_the_kv_cache_is_what_the_weights_leave():
    tokens = kv_cache_tokens(LLAMA, H100)
    assert tokens == 480_399  # the figure the KV cache size math page prints
    pool = instance_pool(LLAMA, H100, block_size=16)
    assert pool.config.num_blocks == tokens // 16
    assert kv_cache_tokens(LLAMA, H100, kv_dtype="fp8") == 2 * tokens  # half the bytes a token


def test_a_model_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="leaves no room for a KV cache"):
        kv_cache_tokens(model("Llama-3.1-70B"), H100)


def test_the_sustainable_rate_is_where_attainment_crosses_the_target():
    pool = Pool(SchedulerConfig(token_budget=256, max_num_seqs=16, num_blocks=4096), LinearCost())
    load = Load(1.0, Fixed(100), Fixed(20))
    slo = SLO(ttft=0.2, tpot=0.015)
    rate = find_rate(pool, load, slo, num_requests=200)
    assert rate > 0
    below = simulate(load.workload(rate, 200), pool).attainment(slo)
    above = simulate(load.workload(rate * 1.1, 200), pool).attainment(slo)
    assert below >= 0.9 > above


def test_an_unreachable_target_sustains_nothing():
    pool = Pool(SchedulerConfig(token_budget=256, max_num_seqs=16, num_blocks=4096), LinearCost())
    assert find_rate(pool, Load(1.0, Fixed(100), Fixed(20)), SLO(0.001, 0.001)) == 0.0


def test_a_plan_for_an_8b_model_adds_up():
    load = Load(50, lengths(1000, 0.0), lengths(200, 0.0))
    slo = SLO(ttft=0.5, tpot=0.05)
    p = plan(LLAMA, H100, load, slo, gpu_hour_price=2.0, api_price_per_million=(0.1, 0.5))
    assert p.gpus_for_throughput == math.ceil(50 / p.sustainable_rate_per_gpu)
    assert p.gpus == max(p.gpus_for_throughput, p.gpus_for_memory)
    assert p.dollars_per_hour == pytest.approx(2.0 * p.gpus)
    output_tokens_per_hour = 50 * 200 * 3600
    assert p.cost_per_million_output_tokens == pytest.approx(
        p.dollars_per_hour / output_tokens_per_hour * 1e6
    )
    api_per_request = (1000 * 0.1 + 200 * 0.5) / 1e6
    assert p.api_dollars_per_hour == pytest.approx(50 * 3600 * api_per_request)
    assert p.breakeven_rate == pytest.approx(2.0 / 3600 / api_per_request)
    assert p.utilization == pytest.approx(50 / (p.gpus * p.sustainable_rate_per_gpu))
    assert p.breakeven_utilization == pytest.approx(p.breakeven_rate / p.sustainable_rate_per_gpu)
    # sized for a peak of twice the average: more GPUs, each token dearer, the API bill unchanged
    peak = p.at(50, peak_rate=100)
    assert peak.gpus_for_throughput == math.ceil(100 / p.sustainable_rate_per_gpu)
    assert peak.gpus_for_memory >= p.gpus_for_memory
    assert peak.cost_per_million_output_tokens == pytest.approx(
        p.cost_per_million_output_tokens * peak.gpus / p.gpus
    )
    assert peak.api_dollars_per_hour == p.api_dollars_per_hour
    assert peak.utilization == pytest.approx(p.utilization * p.gpus / peak.gpus)
    # a 20x load needs more GPUs, never fewer
    p20 = plan(
        LLAMA,
        H100,
        Load(1000, load.prompt_len, load.output_len),
        slo,
        gpu_hour_price=2.0,
        api_price_per_million=(0.1, 0.5),
    )
    assert p20.gpus_for_throughput >= 20 * p.gpus_for_throughput - 20
    assert p20.gpus_for_memory >= p.gpus_for_memory


def test_the_memory_count_binds_for_long_prompts():
    # 32k-token prompts at 50/s: even unqueued, the requests in flight outgrow one GPU's cache.
    load = Load(50.0, Fixed(32_000), Fixed(10))
    p = plan(
        LLAMA,
        H100,
        load,
        SLO(ttft=30.0, tpot=1.0),
        gpu_hour_price=1.0,
        api_price_per_million=(1.0, 1.0),
        token_budget=32_768,
        max_num_seqs=8,
    )
    alone = p.gpus_for_memory * kv_cache_tokens(LLAMA, H100) / (50.0 * 32_005)
    assert p.gpus_for_memory >= 2 and alone > 0.5  # a 32k prefill alone takes over 0.5 s


def test_plans_assume_the_measured_efficiency_and_pools_the_roofline():
    assert inspect.signature(plan).parameters["efficiency"].default is VLLM_H100
    assert instance_pool(LLAMA, H100).cost.efficiency is ROOFLINE
    pool = instance_pool(LLAMA, H100, efficiency=Efficiency(0.5, 0.5))
    assert pool.cost.decode_step_time(8, 100) == pytest.approx(
        2 * instance_pool(LLAMA, H100).cost.decode_step_time(8, 100)
    )


def test_the_published_vllm_runs_imply_the_packaged_efficiency():
    # vLLM 0.13.0, Llama-3.1-8B bf16, one H100 (torchao docs); vLLM's offline defaults there
    vllm = {"token_budget": 16384, "max_num_seqs": 1024}
    prefill = simulate_benchmark(Benchmark(32, 4096, 32, 30946.5), LLAMA, H100, **vllm)
    decode = simulate_benchmark(Benchmark(128, 32, 2048, 6612), LLAMA, H100, **vllm)
    implied = implied_efficiency(prefill, decode)
    assert (round(implied.mfu, 2), round(implied.mbu, 2)) == (VLLM_H100.mfu, VLLM_H100.mbu)
    for run in (prefill, decode):  # the factors reproduce what was measured
        assert run.total_tokens_per_s(implied) == pytest.approx(
            run.benchmark.total_tokens_per_s, rel=1e-3
        )
        assert run.total_tokens_per_s(ROOFLINE) > 1.5 * run.benchmark.total_tokens_per_s


def test_one_simulation_prices_a_benchmark_at_any_efficiency():
    run = simulate_benchmark(Benchmark(8, 300, 20), LLAMA, H100)
    slow = Efficiency(0.6, 0.4)
    pool = instance_pool(LLAMA, H100, efficiency=slow)
    assert run.duration(slow) == pytest.approx(simulate(run.benchmark.workload(), pool).duration)
