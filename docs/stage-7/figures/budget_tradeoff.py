"""TTFT, TPOT and throughput as the per-step token budget varies (at vLLM's measured efficiency)."""

from dataclasses import dataclass, replace
from typing import NamedTuple

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100, StepCost
from llmserve_ref.planning.simulator import simulate
from llmserve_ref.planning.workload import LogNormal, sample_workload

BUDGETS = (256, 512, 1024, 2048, 4096, 8192)


@dataclass
class Split:
    """`cost`, adding up apart the compute time and the memory time of the steps it times."""

    cost: StepCost
    compute: float = 0.0  # seconds, summed over steps
    memory: float = 0.0
    busy: float = 0.0  # the steps' own times: each the larger of its two
    steps: int = 0
    compute_bound: int = 0  # steps whose compute time is the larger

    def step_time(self, num_tokens: int, kv_tokens_read: int, attention_pairs: int) -> float:
        compute = self.cost.compute_time(num_tokens, attention_pairs)
        memory = self.cost.memory_time(num_tokens, kv_tokens_read)
        self.compute, self.memory = self.compute + compute, self.memory + memory
        self.busy += max(compute, memory)
        self.steps += 1
        self.compute_bound += compute > memory
        return max(compute, memory)


class Row(NamedTuple):
    throughput: float  # output tokens/s
    ttft: float  # p90, seconds
    tpot: float  # p90, seconds
    split: Split


def sweep() -> dict[int, Row]:
    """One row per token budget: 1,000 requests at 22.5/s."""
    workload = sample_workload(
        1000, 22.5, LogNormal(1024, 1.0, high=8000), LogNormal(128, 1.0, high=2048), seed=0
    )
    rows = {}
    for budget in BUDGETS:
        pool = instance_pool(
            model("Llama-3.1-8B"), gpu("H100-SXM"), token_budget=budget, efficiency=VLLM_H100
        )
        split = Split(pool.cost)
        r = simulate(workload, replace(pool, cost=split))
        rows[budget] = Row(
            r.throughput(), r.percentile("ttft", 90), r.percentile("tpot", 90), split
        )
    return rows


def figure() -> Figure:
    rows = sweep()
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    throughput = [rows[b][0] for b in BUDGETS]
    ttft = [rows[b][1] for b in BUDGETS]
    left.plot(throughput, ttft, marker="o")
    for b, x, y in zip(BUDGETS, throughput, ttft, strict=True):
        left.annotate(str(b), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    left.set_xlabel("output tokens/s")
    left.set_ylabel("p90 TTFT (s)")
    left.set_yscale("log")
    left.set_title("throughput against TTFT, by token budget", fontsize=10)
    right.plot(BUDGETS, [rows[b][2] * 1e3 for b in BUDGETS], marker="o", color="C1")
    right.set_xscale("log", base=2)
    right.set_xticks(BUDGETS, [str(b) for b in BUDGETS])
    right.set_xlabel("token budget")
    right.set_ylabel("p90 TPOT (ms)")
    right.set_title("bigger chunks slow every decode", fontsize=10)
    return fig
