"""The simulator against hand-computed timelines, with a step cost simple enough to add up."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

import pytest

from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100, Efficiency, StepCost
from llmserve_ref.planning.routing import CacheAware, LeastLoaded, PrefixAffinity, RandomRouter
from llmserve_ref.planning.simulator import Pool, RequestMetrics, SimResult, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import (
    Fixed,
    LogNormal,
    RequestSpec,
    Uniform,
    conversations,
    sample_workload,
)


@dataclass(frozen=True)
class LinearCost:
    """`fixed` seconds per step plus `per_token` per computed token."""

    fixed: float = 0.010
    per_token: float = 0.0

    def step_time(self, num_tokens: int, kv_tokens_read: int, attention_pairs: int) -> float:
        return self.fixed + self.per_token * num_tokens


CONFIG = SchedulerConfig(token_budget=256, max_num_seqs=8, block_size=16, num_blocks=1024)


def test_one_request_gets_ttft_from_its_prefill_steps_and_tpot_from_its_decode_steps():
    cost = LinearCost(fixed=0.010, per_token=0.001)
    spec = RequestSpec("r", arrival_time=2.0, prompt_len=300, output_len=4)
    m = simulate([spec], Pool(CONFIG, cost)).requests[0]
    # prompt chunks of 256 and 44 tokens, then three decode steps of one token
    assert m.ttft == pytest.approx(0.010 + 0.256 + 0.010 + 0.044)
    assert m.tpot == pytest.approx(0.011)
    assert m.e2e_latency == pytest.approx(m.ttft + 3 * 0.011)


def test_an_idle_instance_starts_when_a_request_arrives_not_before():
    specs = [RequestSpec("a", 0.0, 10, 2), RequestSpec("b", 5.0, 10, 2)]
    a, b = simulate(specs, Pool(CONFIG, LinearCost())).requests
    assert a.ttft == pytest.approx(0.010) and b.ttft == pytest.approx(0.010)
    assert b.finish_time == pytest.approx(5.020)


def test_requests_arriving_together_share_steps():
    specs = [RequestSpec(str(i), 0.0, 10, 5) for i in range(8)]
    result = simulate(specs, Pool(CONFIG, LinearCost()), record_steps=True)
    assert result.num_steps == 5 and len(result.steps) == 5
    assert all(m.e2e_latency == pytest.approx(0.050) for m in result.requests)
    assert result.throughput() == pytest.approx(8 * 5 / 0.050)


def test_the_timeline_accounts_for_every_token():
    workload = sample_workload(30, 50.0, Uniform(1, 400), Uniform(1, 60), seed=1)
    result = simulate(workload, Pool(CONFIG, LinearCost(per_token=1e-4)), record_steps=True)
    ran: dict[str, int] = {}
    for step in result.steps:
        assert sum(step.num_scheduled_tokens.values()) <= CONFIG.token_budget
        for request_id, n in step.num_scheduled_tokens.items():
            ran[request_id] = ran.get(request_id, 0) + n
    for spec, m in zip(workload, result.requests, strict=True):
        assert m.num_preemptions == 0
        assert ran[spec.request_id] == spec.prompt_len + spec.output_len - 1  # last token unfed
        assert m.arrival_time < m.first_token_time <= m.finish_time
    starts = [s.start for s in result.steps]
    assert starts == sorted(starts)


def test_continuous_batching_beats_static_batching_when_output_lengths_vary():
    workload = sample_workload(200, math.inf, Fixed(50), LogNormal(50, 1.0, high=1000), seed=0)
    cost = LinearCost(per_token=1e-5)
    continuous = simulate(workload, Pool(CONFIG, cost))
    static = simulate(
        workload, Pool(SchedulerConfig(**{**CONFIG.__dict__, "batching": "static"}), cost)
    )
    assert continuous.throughput() > 2 * static.throughput()
    assert continuous.percentile("e2e_latency", 50) < static.percentile("e2e_latency", 50)


def test_preemptions_are_counted_and_every_request_still_finishes():
    tight = SchedulerConfig(
        token_budget=256, max_num_seqs=8, block_size=16, num_blocks=40, watermark=0.0
    )
    workload = sample_workload(40, math.inf, Uniform(50, 200), Uniform(50, 300), seed=2)
    result = simulate(workload, Pool(tight, LinearCost()))
    assert sum(m.num_preemptions for m in result.requests) > 0
    assert all(not math.isnan(m.finish_time) for m in result.requests)


def test_a_second_instance_takes_the_second_request():
    specs = [RequestSpec("a", 0.0, 200, 1), RequestSpec("b", 0.0, 200, 1)]
    cost = LinearCost(fixed=0.0, per_token=0.001)
    small = SchedulerConfig(token_budget=200, max_num_seqs=8, num_blocks=1024)
    one = simulate(specs, Pool(small, cost))
    two = simulate(specs, Pool(small, cost, num_instances=2))
    assert [m.ttft for m in one.requests] == pytest.approx([0.2, 0.4])
    assert [m.ttft for m in two.requests] == pytest.approx([0.2, 0.2])


def test_disaggregation_hands_the_cache_over_after_the_first_token():
    spec = RequestSpec("r", 0.0, prompt_len=100, output_len=5)
    cost = LinearCost(fixed=0.010)
    result = simulate(
        [spec],
        Pool(CONFIG, cost),
        decode=Pool(CONFIG, cost),
        kv_transfer_time=lambda prompt_len: prompt_len * 1e-4,
        record_steps=True,
    )
    m = result.requests[0]
    assert m.ttft == pytest.approx(0.010)  # the prefill instance samples the first token
    assert m.finish_time == pytest.approx(0.010 + 0.010 + 4 * 0.010)  # 10 ms transfer
    assert m.tpot == pytest.approx((0.010 + 4 * 0.010) / 4)
    assert [s.instance for s in result.steps] == [0, 1, 1, 1, 1]
    assert result.steps[1].num_scheduled_tokens == {"r": 1}  # decode only, no recompute


def test_one_token_outputs_finish_on_the_prefill_pool():
    spec = RequestSpec("r", 0.0, prompt_len=10, output_len=1)
    result = simulate(
        [spec], Pool(CONFIG, LinearCost()), decode=Pool(CONFIG, LinearCost()), record_steps=True
    )
    assert [s.instance for s in result.steps] == [0]
    assert math.isnan(result.requests[0].tpot)
    assert result.requests[0].meets(SLO(ttft=0.02, tpot=0.0))


def test_goodput_counts_requests_meeting_both_targets():
    requests = [
        RequestMetrics("fast", 0.0, 10, 11, first_token_time=0.1, finish_time=1.1),
        RequestMetrics("slow-first", 0.0, 10, 11, first_token_time=0.5, finish_time=1.5),
        RequestMetrics("slow-rest", 0.0, 10, 11, first_token_time=0.1, finish_time=3.1),
    ]
    result = SimResult(requests, num_steps=0)
    slo = SLO(ttft=0.2, tpot=0.1)
    assert [m.meets(slo) for m in requests] == [True, False, False]
    assert result.goodput(slo) == pytest.approx(1 / 3.1)
    assert result.attainment(slo) == pytest.approx(1 / 3)


def test_with_the_roofline_cost_a_bigger_batch_gives_more_tokens_per_second():
    cost = StepCost(model("Llama-3.1-8B"), gpu("H100-SXM"))
    workload = sample_workload(256, math.inf, Fixed(200), Fixed(100), seed=0)
    results = {}
    for seqs in (1, 16, 128):
        config = SchedulerConfig(token_budget=2048, max_num_seqs=seqs, num_blocks=20_000)
        results[seqs] = simulate(workload, Pool(config, cost)).throughput()
    assert results[1] < results[16] < results[128]
    assert results[16] > 10 * results[1]  # decode is memory-bound: batching is nearly free


def test_an_efficiency_slows_the_simulated_engine_by_its_factors():
    llama, h100 = model("Llama-3.1-8B"), gpu("H100-SXM")
    config = SchedulerConfig(token_budget=2048, max_num_seqs=64, num_blocks=20_000)
    decode_bound = sample_workload(64, math.inf, Fixed(16), Fixed(200), seed=0)
    ideal = simulate(decode_bound, Pool(config, StepCost(llama, h100)))
    half_bandwidth = Pool(config, StepCost(llama, h100, efficiency=Efficiency(mfu=1.0, mbu=0.5)))
    # every step but the first (16 tokens of 64 prompts) is a memory-bound decode
    assert simulate(decode_bound, half_bandwidth).duration == pytest.approx(
        2 * ideal.duration, rel=0.01
    )
    measured = simulate(decode_bound, Pool(config, StepCost(llama, h100, efficiency=VLLM_H100)))
    assert measured.throughput() < ideal.throughput() / 1.5


def test_the_same_inputs_give_the_same_result():
    workload = sample_workload(100, 20.0, LogNormal(100, 1.0), LogNormal(50, 1.0), seed=5)
    a, b = (simulate(workload, Pool(CONFIG, LinearCost(per_token=1e-4))) for _ in range(2))
    assert a.requests == b.requests


def test_the_default_router_is_least_loaded():
    workload = sample_workload(60, 30.0, Uniform(10, 300), Uniform(1, 40), seed=3)
    pool = Pool(CONFIG, LinearCost(per_token=1e-4), num_instances=3)
    assert (
        simulate(workload, pool).requests == simulate(workload, pool, router=LeastLoaded()).requests
    )


def test_a_request_finds_the_prefix_an_earlier_one_left_on_its_instance():
    prefix = tuple(range(100))
    specs = [
        RequestSpec(
            str(i), float(i), 110, 3, prefix + tuple(range(1000 * (i + 1), 1000 * (i + 1) + 13))
        )
        for i in range(3)
    ]
    result = simulate(specs, Pool(CONFIG, LinearCost(per_token=1e-3)), record_steps=True)
    assert [m.cached_tokens for m in result.requests] == [0, 96, 96]  # 6 full blocks of 16
    assert result.hit_rate() == pytest.approx(192 / 330)
    assert result.steps[-3].num_scheduled_tokens == {"2": 14}  # only what was not cached
    assert [m.instance for m in result.requests] == [0, 0, 0]


def test_routing_decides_the_hit_rate_across_instances():
    chats = conversations(
        24,
        turns=4,
        rate=4.0,
        system_len=64,
        question_len=Uniform(40, 80),
        answer_len=Uniform(5, 10),
        think_time=1.0,
        seed=0,
    )
    pool = Pool(CONFIG, LinearCost(per_token=1e-4), num_instances=4)
    one = simulate(chats, Pool(CONFIG, LinearCost(per_token=1e-4))).hit_rate()
    spread = simulate(chats, pool, router=RandomRouter(seed=0))
    cache = simulate(chats, pool, router=CacheAware(balance_abs_threshold=2))
    affinity = simulate(chats, pool, router=PrefixAffinity())
    assert spread.hit_rate() < cache.hit_rate() <= one
    assert affinity.hit_rate() == pytest.approx(one)  # one system prompt: one replica does all
    assert {m.instance for m in affinity.requests} == {affinity.requests[0].instance}
    per_instance = Counter(m.instance for m in cache.requests)
    assert len(per_instance) >= 3  # spread when loads drift apart, where affinity put all on one
    # With loads this light, the default thresholds never find them out of balance: every
    # first turn matches the system prompt best where it was first sent.
    sticky = simulate(chats, pool, router=CacheAware())
    assert {m.instance for m in sticky.requests} == {0}


def test_a_request_stops_at_its_end_of_sequence_before_max_tokens():
    spec = RequestSpec("r", 0.0, prompt_len=20, output_len=4)
    cost = LinearCost(fixed=0.010)
    exact = simulate([spec], Pool(CONFIG, cost)).requests[0]
    early = simulate([replace(spec, max_tokens=500)], Pool(CONFIG, cost)).requests[0]
    assert early.finish_time == exact.finish_time == pytest.approx(0.040)
    assert early.normalized_latency == pytest.approx(0.040 / 4)


def test_a_reservation_admits_fewer_requests_at_once():
    workload = [
        replace(r, max_tokens=200)
        for r in sample_workload(40, math.inf, Uniform(20, 60), Uniform(5, 40), seed=1)
    ]
    small = {"token_budget": 256, "max_num_seqs": 32, "block_size": 16, "num_blocks": 64}
    steps = {}
    for reservation in ("paged", "max_tokens", "context"):
        config = SchedulerConfig(**small, reservation=reservation, max_model_len=512)
        result = simulate(workload, Pool(config, LinearCost()), record_steps=True)
        assert all(not math.isnan(m.finish_time) for m in result.requests)
        steps[reservation] = max(len(s.num_scheduled_tokens) for s in result.steps)
    # 64 blocks: 2 regions of 512 tokens, at most 4 of up to 260, and paged as many as fit.
    assert steps["context"] == 2 and steps["max_tokens"] <= 4 < steps["paged"]
