"""Normalized latency against request rate under each KV memory policy, in the simulator:
the PagedAttention paper's Figure 12, for Llama-2-7B on an A100 (40 GB)."""

import math
from dataclasses import replace
from statistics import fmean

from matplotlib.figure import Figure

from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.planning.capacity import kv_cache_tokens
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100, StepCost
from llmserve_ref.planning.simulator import Pool, simulate
from llmserve_ref.planning.workload import LogNormal, RequestSpec, sample_workload

LLAMA2, A100 = model("Llama-2-7B"), gpu("A100-SXM-40GB")
POLICIES = ("context", "max_tokens", "paged")
RATES = (1, 2, 4, 6, 8, 10, 12)
MAX_TOKENS = 1024
SLO = 0.05  # seconds per output token: the mean normalized latency allowed


def chat(rate: float, num_requests: int = 200) -> list[RequestSpec]:
    """Chat-like requests (median prompt 256 tokens, median answer 192, heavy tails), each
    asking for max_tokens=1024 and stopping at its own end of sequence."""
    requests = sample_workload(
        num_requests,
        rate,
        LogNormal(256, 1.0, high=2048),
        LogNormal(192, 1.0, high=MAX_TOKENS),
        seed=0,
    )
    return [replace(r, max_tokens=MAX_TOKENS) for r in requests]


def policy_config(policy: str, block_size: int = 16) -> SchedulerConfig:
    """One A100's KV cache under `policy`; "context" reserves Llama-2's 4096 tokens."""
    return SchedulerConfig(
        token_budget=4096,
        block_size=block_size,
        num_blocks=kv_cache_tokens(LLAMA2, A100) // block_size,
        reservation=policy,
        max_model_len=LLAMA2.config.max_position_embeddings,
    )


def normalized_latency(policy: str, rate: float, block_size: int = 16) -> float:
    """The mean over requests of end-to-end latency per output token, in seconds."""
    cost = StepCost(LLAMA2, A100, efficiency=VLLM_H100)
    result = simulate(chat(rate), Pool(policy_config(policy, block_size), cost))
    return fmean(m.normalized_latency for m in result.requests)


def sweep() -> dict[str, dict[float, float]]:
    return {p: {rate: normalized_latency(p, rate) for rate in RATES} for p in POLICIES}


def sustainable(curve: dict[float, float]) -> float:
    """The highest rate of the sweep whose normalized latency is within the SLO."""
    return max((rate for rate, latency in curve.items() if latency <= SLO), default=math.nan)


def figure() -> Figure:
    curves = sweep()
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    for policy, curve in curves.items():
        ax.plot(list(curve), [v * 1e3 for v in curve.values()], marker="o", label=policy)
    ax.axhline(SLO * 1e3, color="0.5", linestyle="--", linewidth=1)
    ax.annotate("SLO", (RATES[0], SLO * 1e3), xytext=(2, 3), textcoords="offset points", fontsize=8)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("normalized latency (ms per output token)")
    ax.set_yscale("log")
    ticks = (20, 50, 100, 200, 400)
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.legend(title="KV memory", fontsize=8)
    ax.set_title("Llama-2-7B on one A100: latency explodes where memory runs out", fontsize=10)
    return fig
