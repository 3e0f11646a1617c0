"""How fast the serving simulator runs, and three results it gives, on stated workloads.

    python benchmarks/simulator.py

1. Speed: simulated requests per second of wall time, for 10,000 requests of
   Llama-3.1-8B on one H100-SXM (prompts lognormal, median 512; outputs
   lognormal, median 128; 40 requests/s, Poisson).
2. Continuous / static batching throughput on the canonical offline batch: 2,000
   requests at once, same outputs, same KV blocks (H100-SXM memory after the
   weights), same max_num_seqs (256) and token budget (2048).
3. Goodput (requests/s meeting TTFT <= 0.5 s and TPOT <= 10 ms) of four H100s,
   colocated (4 instances) against disaggregated (2 prefill + 2 decode, KV sent at
   50 GB/s), for 1,000 requests at 20 requests/s with long prompts (median 4096)
   and outputs of median 256.

All step times come from `llmserve_ref.planning.roofline.StepCost` at the datasheet roof.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.simulator import kv_transfer, simulate
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import LogNormal, sample_workload

MODEL, GPU = model("Llama-3.1-8B"), gpu("H100-SXM")


def speed() -> None:
    workload = sample_workload(
        10_000, 40.0, LogNormal(512, 1.0, high=8000), LogNormal(128, 1.0, high=2048), seed=0
    )
    start = time.perf_counter()
    result = simulate(workload, instance_pool(MODEL, GPU))
    wall = time.perf_counter() - start
    print(
        f"speed: {len(workload):,} requests, {result.num_steps:,} steps, "
        f"{result.duration:.0f} s simulated in {wall:.2f} s of wall time: "
        f"{len(workload) / wall:,.0f} simulated requests/s"
    )


def continuous_over_static() -> None:
    workload = sample_workload(
        2000, math.inf, LogNormal(512, 1.0, high=4096), LogNormal(128, 1.0, high=2048), seed=0
    )
    pool = instance_pool(MODEL, GPU)
    static = replace(pool, config=replace(pool.config, batching="static"))
    c, s = simulate(workload, pool), simulate(workload, static)
    print(
        f"continuous/static: {c.throughput():,.0f} / {s.throughput():,.0f} output tokens/s "
        f"= {c.throughput() / s.throughput():.2f}x "
        f"({pool.config.num_blocks:,} blocks of {pool.config.block_size} tokens each)"
    )


def disaggregated_vs_colocated() -> None:
    workload = sample_workload(
        1000, 20.0, LogNormal(4096, 0.5, high=16000), LogNormal(256, 0.5, high=2048), seed=0
    )
    slo = SLO(ttft=0.5, tpot=0.010)
    colocated = simulate(workload, instance_pool(MODEL, GPU, num_instances=4))
    disaggregated = simulate(
        workload,
        instance_pool(MODEL, GPU, num_instances=2, token_budget=8192),
        decode=instance_pool(MODEL, GPU, num_instances=2),
        kv_transfer_time=kv_transfer(MODEL.config, 50e9),
    )
    print(
        f"goodput on 4 GPUs: colocated {colocated.goodput(slo):.1f} requests/s "
        f"({colocated.attainment(slo):.0%} within SLO), disaggregated 2P+2D "
        f"{disaggregated.goodput(slo):.1f} requests/s "
        f"({disaggregated.attainment(slo):.0%} within SLO)"
    )


if __name__ == "__main__":
    speed()
    continuous_over_static()
    disaggregated_vs_colocated()
