"""TTFT, TPOT and throughput as the per-step token budget varies (at vLLM's measured efficiency)."""

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100
from llmserve_ref.planning.simulator import simulate
from llmserve_ref.planning.workload import LogNormal, sample_workload

BUDGETS = (256, 512, 1024, 2048, 4096, 8192)


def sweep() -> dict[int, tuple[float, float, float]]:
    """token budget: (output tokens/s, p90 TTFT s, p90 TPOT s), 1,000 requests at 22.5/s."""
    workload = sample_workload(
        1000, 22.5, LogNormal(1024, 1.0, high=8000), LogNormal(128, 1.0, high=2048), seed=0
    )
    rows = {}
    for budget in BUDGETS:
        pool = instance_pool(
            model("Llama-3.1-8B"), gpu("H100-SXM"), token_budget=budget, efficiency=VLLM_H100
        )
        r = simulate(workload, pool)
        rows[budget] = (r.throughput(), r.percentile("ttft", 90), r.percentile("tpot", 90))
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
