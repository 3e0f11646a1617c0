"""The simulator against hand-computed timelines, with a step cost simple enough to add up."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from llmserve_ref.engine.scheduler import SchedulerConfig
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100, Efficiency, StepCost
from llmserve_ref.planning.simulator import Pool, RequestMetrics, SimResult, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import Fixed, LogNormal, RequestSpec, Uniform, sample_workload


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
