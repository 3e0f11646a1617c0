"""Goodput of four H100s, colocated or split into prefill and decode pools, against load."""

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.simulator import SLO, SimResult, kv_transfer, simulate
from llmserve_ref.planning.workload import LogNormal, generate

LLAMA, H100 = model("Llama-3.1-8B"), gpu("H100-SXM")
RATES = (10.0, 15.0, 20.0, 25.0)
SETUPS = ("4 colocated", "2 prefill + 2 decode")
SLOS = {"tight TPOT": SLO(ttft=0.5, tpot=0.010), "loose TPOT": SLO(ttft=0.5, tpot=0.025)}


def run(setup: str, rate: float, num_requests: int = 500) -> SimResult:
    """Long prompts (median 4096), outputs of median 256, Poisson arrivals at `rate`."""
    workload = generate(num_requests, rate, LogNormal(4096, 0.5, high=16000),
                        LogNormal(256, 0.5, high=2048), seed=0)
    if setup == "4 colocated":
        return simulate(workload, instance_pool(LLAMA, H100, num_instances=4))
    prefill = int(setup[0])
    return simulate(
        workload,
        instance_pool(LLAMA, H100, num_instances=prefill, token_budget=8192),
        decode=instance_pool(LLAMA, H100, num_instances=4 - prefill),
        kv_transfer_time=kv_transfer(LLAMA.config, 50e9),  # 400 Gb/s RDMA between nodes
    )


def sweep() -> dict[tuple[str, float], SimResult]:
    return {(setup, rate): run(setup, rate) for setup in SETUPS for rate in RATES}


def figure() -> Figure:
    results = sweep()
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    for ax, (name, slo) in zip(fig.subplots(1, 2, sharey=True), SLOS.items(), strict=True):
        for setup, marker in zip(SETUPS, "os", strict=True):
            ax.plot(RATES, [results[setup, r].goodput(slo) for r in RATES], marker=marker,
                    label=setup)
        ax.set_title(f"{name}: TTFT <= {slo.ttft:g} s, TPOT <= {slo.tpot * 1e3:g} ms",
                     fontsize=10)
        ax.set_xlabel("arrival rate (requests/s)")
    fig.axes[0].set_ylabel("goodput (requests/s in SLO)")
    fig.axes[0].legend(fontsize=8)
    return fig
