"""Prefix-cache hit rate and time to first token against the number of replicas, by router."""

from collections import Counter
from dataclasses import replace
from typing import NamedTuple

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model as catalog_model
from llmserve_ref.planning.roofline import VLLM_H100
from llmserve_ref.planning.routing import (
    CacheAware,
    LeastLoaded,
    PrefixAffinity,
    RandomRouter,
    Router,
)
from llmserve_ref.planning.simulator import SimResult, simulate
from llmserve_ref.planning.workload import LogNormal, RequestSpec, conversations

REPLICAS = (1, 2, 4, 8)
ROUTERS = {
    "random": RandomRouter,
    "least-loaded": LeastLoaded,
    "prefix-affinity": PrefixAffinity,
    # SGLang's thresholds are for hundreds of requests per replica; these run about a dozen.
    "cache-aware": lambda: CacheAware(balance_abs_threshold=8),
}


def chats(replicas: int) -> list[RequestSpec]:
    """12 five-turn conversations per replica, 4 started a second per replica, each on one of
    4 system prompts of 256 tokens: questions of about 384 tokens, answers of about 64."""
    return conversations(
        12 * replicas,
        turns=5,
        rate=4.0 * replicas,
        system_len=256,
        question_len=LogNormal(384, 0.5, high=4096),
        answer_len=LogNormal(64, 0.5, high=1024),
        think_time=1.0,
        num_system_prompts=4,
        seed=0,
    )


def serve(replicas: int, router: Router) -> SimResult:
    """The conversations on `replicas` H100s serving Llama-3.1-8B, at vLLM's efficiency, each
    with 8192 blocks of KV cache (a quarter of what an H100 holds beside the weights: room
    enough for these conversations, and quicker to simulate)."""
    llama, h100 = catalog_model("Llama-3.1-8B"), gpu("H100-SXM")
    pool = instance_pool(llama, h100, num_instances=replicas, efficiency=VLLM_H100)
    pool = replace(pool, config=replace(pool.config, num_blocks=8192))
    return simulate(chats(replicas), pool, router=router)


class Row(NamedTuple):
    hit_rate: float
    ttft: float  # p90, seconds
    tpot: float  # p90, seconds
    busiest: float  # the busiest replica's requests over the average replica's


def row(result: SimResult, replicas: int) -> Row:
    per_replica = Counter(m.instance for m in result.requests)
    busiest = max(per_replica.values()) / (len(result.requests) / replicas)
    return Row(
        result.hit_rate(), result.percentile("ttft", 90), result.percentile("tpot", 90), busiest
    )


def sweep() -> dict[str, dict[int, Row]]:
    """Every router at every replica count (one replica runs once: routing cannot matter)."""
    alone = row(serve(1, LeastLoaded()), 1)
    return {
        name: {n: alone if n == 1 else row(serve(n, make()), n) for n in REPLICAS}
        for name, make in ROUTERS.items()
    }


def figure() -> Figure:
    rows = sweep()
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for name, by_n in rows.items():
        left.plot(REPLICAS, [r.hit_rate for r in by_n.values()], marker="o", label=name)
        right.plot(REPLICAS, [r.ttft * 1e3 for r in by_n.values()], marker="o", label=name)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(REPLICAS, [str(n) for n in REPLICAS])
        ax.set_xlabel("replicas (load per replica fixed)")
    left.set_ylabel("prefix-cache hit rate")
    left.set_ylim(0, 1)
    right.set_ylabel("p90 TTFT (ms)")
    left.legend(fontsize=8)
    left.set_title("a router blind to prefixes loses the cache", fontsize=10)
    right.set_title("and pays for it in time to first token", fontsize=10)
    return fig
