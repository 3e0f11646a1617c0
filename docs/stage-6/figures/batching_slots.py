"""Which request holds which batch slot, step by step, under static and continuous batching."""

from dataclasses import replace

from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.simulator import SimResult, simulate
from llmserve_ref.planning.workload import LogNormal, sample_workload

SLOTS = 8
WORKLOAD = sample_workload(
    24, float("inf"), LogNormal(256, 0.5), LogNormal(40, 0.8, high=200), seed=3
)


def runs() -> dict[str, SimResult]:
    """The same 24 requests, 8 at a time, on Llama-3.1-8B and one H100."""
    pool = instance_pool(model("Llama-3.1-8B"), gpu("H100-SXM"), max_num_seqs=SLOTS)
    return {
        batching: simulate(
            WORKLOAD,
            replace(pool, config=replace(pool.config, batching=batching)),
            record_steps=True,
        )
        for batching in ("static", "continuous")
    }


def slot_rows(result: SimResult) -> list[tuple[int, int, int, str]]:
    """(slot, first step, last step, request id); a request takes the lowest slot free."""
    span: dict[str, list[int]] = {}
    for i, step in enumerate(result.steps):
        for request_id in step.num_scheduled_tokens:
            span.setdefault(request_id, [i, i])[1] = i
    free_at = [0] * SLOTS  # the step from which each slot is free again
    rows = []
    for request_id, (first, last) in sorted(span.items(), key=lambda kv: kv[1][0]):
        slot = next(s for s in range(SLOTS) if free_at[s] <= first)
        free_at[slot] = last + 1
        rows.append((slot, first, last, request_id))
    return rows


def figure() -> Figure:
    results = runs()
    fig = Figure(figsize=(8, 4.8), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    colors = [f"C{i}" for i in range(10)]
    for ax, (batching, result) in zip(axes, results.items(), strict=True):
        for slot, first, last, request_id in slot_rows(result):
            ax.barh(
                slot,
                last - first + 1,
                left=first,
                height=0.8,
                color=colors[int(request_id) % 10],
                edgecolor="white",
                linewidth=0.3,
            )
        ax.set_yticks(range(SLOTS))
        ax.set_ylabel("batch slot")
        ax.set_title(
            f"{batching}: {result.num_steps} steps for the same 24 requests (white: idle slot)",
            fontsize=10,
        )
    axes[-1].set_xlabel("step")
    return fig
