"""The page's simulator (JavaScript) schedules exactly what `planning.simulator` schedules.

The JS core runs under Node on workloads made by `planning.workload` in Python, over a grid
of token budgets, `max_num_seqs`, KV cache sizes (some small enough to preempt), arrival rates
and policies, with the step-time model the site ships (`hooks/site_data.py`). Every step must
run the same requests with the same tokens and preempt the same ones, and every latency and
summary metric must agree to floating-point tolerance. Its workload generator is checked
against the distributions' parameters and a large Python sample.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from pathlib import Path

import pytest

from conftest import NEEDS_NODE, run_node
from llmserve_ref.engine.scheduler import Scheduler
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100, StepCost
from llmserve_ref.planning.simulator import Pool, SimResult, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import LogNormal, RequestSpec, Uniform, sample_workload

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = ROOT / "docs" / "javascripts" / "scheduler-sim.js"
sys.path.insert(0, str(ROOT / "hooks"))

from site_data import step_cost_as_dict  # noqa: E402  (the numbers the site ships)

pytestmark = NEEDS_NODE

COST = StepCost(model("Llama-3.1-8B"), gpu("H100-SXM"), efficiency=VLLM_H100)
SLO_ = SLO(ttft=0.5, tpot=0.05)
METRICS = ("ttft", "tpot", "e2e_latency")
QUANTILES = (50, 90, 99)

# Reads cases from stdin, simulates each with the JS core, prints the results as JSON.
RUNNER = r"""
const core = require(process.argv[1]);
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const results = cases.map((c) => {
  if (c.sample) {
    const lengths = (d) => core[d.kind](...d.args);
    return core.sampleWorkload(c.sample.n, c.sample.rate ?? Infinity, lengths(c.sample.prompt),
      lengths(c.sample.output), { burstiness: c.sample.burstiness, seed: c.sample.seed });
  }
  try {
    const config = core.schedulerConfig(c.config);
    const result = core.simulate(c.workload, config, core.stepCost(c.cost),
      { numInstances: c.instances, recordSteps: true });
    const slo = c.slo;
    const summary = { throughput: result.throughput(), goodput: result.goodput(slo),
      attainment: result.attainment(slo), num_steps: result.numSteps };
    for (const metric of ["ttft", "tpot", "e2eLatency"]) {
      for (const q of [50, 90, 99]) summary[`${metric} p${q}`] = result.percentile(metric, q);
    }
    return {
      steps: result.steps.map((s) => [s.instance, s.start, s.duration,
        [...s.numScheduledTokens], s.preempted]),
      requests: result.requests.map((m) => [m.requestId, m.firstTokenTime, m.finishTime,
        m.numPreemptions]),
      summary,
    };
  } catch (error) {
    return { error: error.message };
  }
});
process.stdout.write(JSON.stringify(results));
"""


def run_js(cases: list[dict]) -> list:
    return run_node(RUNNER, SIMULATOR, cases)


def js_workload(workload: list[RequestSpec]) -> list[dict]:
    return [
        {
            "requestId": r.request_id,
            "arrivalTime": r.arrival_time,
            "promptLen": r.prompt_len,
            "outputLen": r.output_len,
        }
        for r in workload
    ]


def js_config(config: SchedulerConfig) -> dict:
    return {
        "tokenBudget": config.token_budget,
        "maxNumSeqs": config.max_num_seqs,
        "blockSize": config.block_size,
        "numBlocks": config.num_blocks,
        "batching": config.batching,
        "priority": config.priority,
        "watermark": config.watermark,
        "maxSkips": config.max_skips,
    }


def python_run(
    workload: list[RequestSpec], config: SchedulerConfig, instances: int, monkeypatch
) -> tuple[SimResult, list[list[str]]]:
    """The Python simulation, and the requests each step preempted, in step order."""
    preempted: list[list[str]] = []
    schedule = Scheduler.schedule

    def recording(self):
        out = schedule(self)
        preempted.append(list(out.preempted))
        return out

    with monkeypatch.context() as m:
        m.setattr(Scheduler, "schedule", recording)
        result = simulate(workload, Pool(config, COST, instances), record_steps=True)
    return result, preempted


def expected(result: SimResult, preempted: list[list[str]]) -> dict:
    summary = {
        "throughput": result.throughput(),
        "goodput": result.goodput(SLO_),
        "attainment": result.attainment(SLO_),
        "num_steps": result.num_steps,
    }
    for metric, q in itertools.product(METRICS, QUANTILES):
        js_name = "e2eLatency" if metric == "e2e_latency" else metric
        summary[f"{js_name} p{q}"] = result.percentile(metric, q)
    return {
        "steps": [
            [s.instance, s.start, s.duration, list(s.num_scheduled_tokens.items()), p]
            for s, p in zip(result.steps, preempted, strict=True)
        ],
        "requests": [
            [m.request_id, m.first_token_time, m.finish_time, m.num_preemptions]
            for m in result.requests
        ],
        "summary": summary,
    }


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def compare(got: dict, want: dict) -> str | None:
    """The first difference between the JS and the Python run, or None."""
    if len(got["steps"]) != len(want["steps"]):
        return f"{len(got['steps'])} steps in JS, {len(want['steps'])} in Python"
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        g_tokens = [tuple(item) for item in g[3]]
        same = g[0] == w[0] and g_tokens == w[3] and g[4] == w[4]
        if not (same and close(g[1], w[1]) and close(g[2], w[2])):
            return f"step {i}: JS {g}, Python {w}"
    for g, w in zip(got["requests"], want["requests"], strict=True):
        if g[0] != w[0] or g[3] != w[3] or not (close(g[1], w[1]) and close(g[2], w[2])):
            return f"request: JS {g}, Python {w}"
    for key, w in want["summary"].items():
        if not close(got["summary"][key], w):
            return f"{key}: JS {got['summary'][key]}, Python {w}"
    return None


def grid() -> list[tuple[list[RequestSpec], SchedulerConfig, int]]:
    """Workloads and configs; the smallest caches (60 blocks of 16) force preemptions."""
    cases = []
    for rate, seed in ((2.0, 1), (20.0, 2), (math.inf, 3)):
        workload = sample_workload(
            40,
            rate,
            LogNormal(256, 1.0, high=600),
            LogNormal(48, 1.0, high=300),
            seed=seed,
        )
        for budget, seqs, blocks in itertools.product((128, 512, 2048), (4, 32), (60, 200, 4096)):
            if budget >= seqs:
                config = SchedulerConfig(
                    token_budget=budget, max_num_seqs=seqs, block_size=16, num_blocks=blocks
                )
                cases.append((workload, config, 1))
        for policy in (
            {"priority": "prefill"},
            {"batching": "static"},
            {"max_skips": 2},
            {"watermark": 0.0},
        ):
            config = SchedulerConfig(token_budget=256, max_num_seqs=16, num_blocks=80, **policy)
            cases.append((workload, config, 1))
        cases.append((workload, SchedulerConfig(token_budget=512, num_blocks=120), 3))
    return cases


def test_port_schedules_every_step_as_python_does(monkeypatch):
    cases = grid()
    cost = step_cost_as_dict(COST)
    slo = {"ttft": SLO_.ttft, "tpot": SLO_.tpot, "e2e": SLO_.e2e}
    wanted = [expected(*python_run(w, c, n, monkeypatch)) for w, c, n in cases]
    got = run_js(
        [
            {
                "workload": js_workload(w),
                "config": js_config(c),
                "cost": cost,
                "instances": n,
                "slo": slo,
            }
            for w, c, n in cases
        ]
    )
    mismatches = [
        (c, n, diff)
        for (_, c, n), g, w in zip(cases, got, wanted, strict=True)
        if (diff := compare(g, w) if "error" not in g else g["error"]) is not None
    ]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ, first: {mismatches[0]}"
    # The grid reaches what the port must get right: preemptions, chunked prompts, queues.
    assert sum(r[3] for w in wanted for r in w["requests"]) > 50
    assert any(max(t for _, t in s[3]) == 128 for w in wanted for s in w["steps"])
    assert any(w["summary"]["attainment"] < 0.5 for w in wanted)
    assert any(w["summary"]["attainment"] > 0.9 for w in wanted)


def test_port_refuses_what_python_refuses():
    workload = [{"requestId": "huge", "arrivalTime": 0.0, "promptLen": 30, "outputLen": 10}]
    bad_configs = [{"tokenBudget": 8, "maxNumSeqs": 16}, {"watermark": 1.0}, {"numBlocks": 0}]
    cases = [
        {"workload": workload, "config": {"blockSize": 4, "numBlocks": 8}},
        *({"workload": workload, "config": c} for c in bad_configs),
    ]
    for c in cases:
        c.update(cost=step_cost_as_dict(COST), instances=1, slo={})
    results = run_js(cases)
    assert results[0] == {
        "error": "request 'huge' needs 10 KV blocks for 30 prompt + 10 max_tokens at block_size "
        "4, but the whole cache has 8; shorten the prompt or max_tokens, or give the cache "
        "more blocks"
    }
    for result in results[1:]:
        assert set(result) == {"error"}, result


def sample_js(n: int, rate: float, prompt: dict, output: dict, burstiness: float, seed: int):
    spec = {"n": n, "prompt": prompt, "output": output, "burstiness": burstiness, "seed": seed}
    spec["rate"] = None if math.isinf(rate) else rate
    return run_js([{"sample": spec}])[0]


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_workload_generator_samples_python_distributions(burstiness):
    n, rate = 20_000, 8.0
    prompt, output = LogNormal(1024, 1.0, high=8000), Uniform(10, 20)
    js = sample_js(
        n,
        rate,
        {"kind": "logNormal", "args": [1024, 1.0, 1, 8000]},
        {"kind": "uniform", "args": [10, 20]},
        burstiness,
        seed=7,
    )
    py = sample_workload(n, rate, prompt, output, burstiness=burstiness, seed=7)
    times = [r["arrivalTime"] for r in js]
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    # Gamma gaps: mean 1 / rate, squared coefficient of variation 1 / burstiness.
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.03)
    cv2 = statistics.pvariance(gaps) / statistics.fmean(gaps) ** 2
    assert cv2 == pytest.approx(1 / burstiness, rel=0.08)
    prompts = [r["promptLen"] for r in js]
    py_prompts = [r.prompt_len for r in py]
    assert statistics.median(prompts) == pytest.approx(prompt.median, rel=0.04)
    assert statistics.fmean(prompts) == pytest.approx(statistics.fmean(py_prompts), rel=0.03)
    assert min(prompts) >= 1 and max(prompts) == 8000  # clipped to [low, high]
    outputs = [r["outputLen"] for r in js]
    assert set(outputs) == set(range(10, 21))  # both ends included, like numpy's endpoint=True
    assert statistics.fmean(outputs) == pytest.approx(15, abs=0.1)
    assert [r["requestId"] for r in js] == [str(i) for i in range(n)]


def test_workload_generator_is_seeded_and_offline_batches_start_at_zero():
    lengths = {"kind": "fixed", "args": [100]}
    a, b, c = (sample_js(50, 4.0, lengths, lengths, 1.0, seed) for seed in (3, 3, 4))
    assert a == b and a != c
    batch = sample_js(5, math.inf, lengths, lengths, 1.0, 0)
    assert [r["arrivalTime"] for r in batch] == [0] * 5
    assert {r["promptLen"] for r in batch} == {100}
