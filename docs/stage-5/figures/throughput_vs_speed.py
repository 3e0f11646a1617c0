"""Per-user decode speed against total output throughput as concurrency grows (simulated)."""

import numpy as np
from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.simulator import SimResult, simulate
from llmserve_ref.planning.workload import Fixed, sample_workload

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PROMPT, OUTPUT = 512, 256


def run(concurrency: int) -> SimResult:
    """`concurrency` users in a closed loop: every request waiting at t=0, at most
    `concurrency` running at once (the scheduler's max_num_seqs), four rounds."""
    pool = instance_pool(model("Llama-3.1-8B"), gpu("H100-SXM"), max_num_seqs=concurrency)
    workload = sample_workload(4 * concurrency, float("inf"), Fixed(PROMPT), Fixed(OUTPUT))
    return simulate(workload, pool)


def points() -> list[tuple[int, float, float]]:
    """(concurrency, tokens/s each user sees = 1 / median TPOT, output tokens/s in all)."""
    rows = []
    for c in CONCURRENCY:
        result = run(c)
        tpot = float(np.median([m.tpot for m in result.requests]))
        rows.append((c, 1 / tpot, result.throughput()))
    return rows


def figure() -> Figure:
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    rows = points()
    ax.plot([r[2] for r in rows], [r[1] for r in rows], marker="o")
    for c, speed, total in rows:
        ax.annotate(f"{c}", (total, speed), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("total output throughput (tokens/s, all users)")
    ax.set_ylabel("per-user speed, 1 / TPOT (tokens/s)")
    ax.set_title("Llama-3.1-8B on one H100 (simulated), labelled by concurrency", fontsize=10)
    ax.grid(True, alpha=0.3)
    return fig
