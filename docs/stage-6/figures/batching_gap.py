"""Throughput of continuous over static batching as output lengths spread out."""

from dataclasses import replace

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.simulator import SimResult, simulate
from llmserve_ref.planning.workload import LogNormal, sample_workload

SIGMAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25)


def gap_runs(
    sigma: float, num_requests: int = 600, record_steps: bool = False
) -> dict[str, SimResult]:
    """Both policies on one workload: prompts ~512, outputs of median 128 and spread sigma."""
    workload = sample_workload(
        num_requests,
        float("inf"),
        LogNormal(512, 0.5, high=4096),
        LogNormal(128, sigma, low=1, high=4096),
        seed=0,
    )
    pool = instance_pool(model("Llama-3.1-8B"), gpu("H100-SXM"))
    return {
        batching: simulate(
            workload,
            replace(pool, config=replace(pool.config, batching=batching)),
            record_steps=record_steps,
        )
        for batching in ("static", "continuous")
    }


def throughputs(sigma: float, num_requests: int = 600) -> dict[str, float]:
    """Output tokens/s of both policies (see `gap_runs`)."""
    return {batching: r.throughput() for batching, r in gap_runs(sigma, num_requests).items()}


def figure() -> Figure:
    rows = [throughputs(s) for s in SIGMAS]
    fig = Figure(figsize=(7, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for batching, marker in (("continuous", "o"), ("static", "s")):
        left.plot(SIGMAS, [r[batching] for r in rows], marker=marker, label=batching)
    left.set_xlabel("sigma of log output length")
    left.set_ylabel("output tokens/s, one H100")
    left.set_ylim(bottom=0)
    left.legend()
    right.plot(SIGMAS, [r["continuous"] / r["static"] for r in rows], marker="o", color="C2")
    right.set_xlabel("sigma of log output length")
    right.set_ylabel("continuous / static throughput")
    right.set_ylim(bottom=1)
    fig.suptitle(
        "Llama-3.1-8B, 600 requests at once, same memory and max_num_seqs (256)", fontsize=10
    )
    return fig
