"""Goodput of four H100s, colocated or split into prefill and decode pools, against load."""

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100
from llmserve_ref.planning.simulator import SimResult, kv_transfer, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import LogNormal, sample_workload

LLAMA, H100 = model("Llama-3.1-8B"), gpu("H100-SXM")
RATES = (3.0, 4.0, 5.0, 6.0)
SETUPS = ("4 colocated", "2 prefill + 2 decode")
SLOS = {"tight TPOT": SLO(ttft=1.5, tpot=0.015), "loose TPOT": SLO(ttft=1.5, tpot=0.040)}


def run(
    setup: str,
    rate: float,
    prompt: int = 8192,
    output: int = 128,
    num_requests: int = 500,
    record_steps: bool = False,
) -> SimResult:
    """Prompts and outputs lognormal around `prompt` and `output` tokens, Poisson arrivals at
    `rate`, every H100 at the efficiency vLLM measured."""
    workload = sample_workload(
        num_requests,
        rate,
        LogNormal(prompt, 0.5, high=32000),
        LogNormal(output, 0.5, high=2048),
        seed=0,
    )
    if setup == "4 colocated":
        colocated = instance_pool(
            LLAMA, H100, num_instances=4, token_budget=2048, efficiency=VLLM_H100
        )
        return simulate(workload, colocated, record_steps=record_steps)
    prefill = int(setup[0])
    return simulate(
        workload,
        instance_pool(LLAMA, H100, num_instances=prefill, token_budget=8192, efficiency=VLLM_H100),
        decode=instance_pool(LLAMA, H100, num_instances=4 - prefill, efficiency=VLLM_H100),
        kv_transfer_time=kv_transfer(LLAMA.config, 50e9),  # 400 Gb/s RDMA between nodes
        record_steps=record_steps,
    )


def sweep() -> dict[tuple[str, float], SimResult]:
    return {(setup, rate): run(setup, rate) for setup in SETUPS for rate in RATES}


def figure() -> Figure:
    results = sweep()
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    for ax, (name, slo) in zip(fig.subplots(1, 2, sharey=True), SLOS.items(), strict=True):
        for setup, marker in zip(SETUPS, "os", strict=True):
            ax.plot(
                RATES, [results[setup, r].goodput(slo) for r in RATES], marker=marker, label=setup
            )
        ax.set_title(f"{name}: TTFT <= {slo.ttft:g} s, TPOT <= {slo.tpot * 1e3:g} ms", fontsize=10)
        ax.set_xlabel("arrival rate (requests/s)")
    fig.axes[0].set_ylabel("goodput (requests/s in SLO)")
    fig.axes[0].legend(fontsize=8)
    return fig
