"""A simulated timeline: when each request ran a prompt chunk or a decode token."""

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from llmserve_ref.planning.capacity import instance_pool
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100
from llmserve_ref.planning.simulator import SimResult, simulate
from llmserve_ref.planning.workload import LogNormal, sample_workload


def timeline_run() -> SimResult:
    """12 requests at 40/s on Llama-3.1-8B, one H100 at vLLM's efficiency, a 1024-token budget."""
    workload = sample_workload(
        12, 40.0, LogNormal(1500, 0.8, high=6000), LogNormal(40, 0.5), seed=1
    )
    pool = instance_pool(
        model("Llama-3.1-8B"), gpu("H100-SXM"), token_budget=1024, efficiency=VLLM_H100
    )
    return simulate(workload, pool, record_steps=True)


def figure() -> Figure:
    result = timeline_run()
    fig = Figure(figsize=(8, 3.8), layout="constrained")
    ax = fig.add_subplot()
    for m in result.requests:
        ax.plot(
            [m.arrival_time * 1e3] * 2,
            [int(m.request_id) - 0.4, int(m.request_id) + 0.4],
            color="black",
            linewidth=1,
        )
    for step in result.steps:
        for request_id, n in step.num_scheduled_tokens.items():
            ax.barh(
                int(request_id),
                step.duration * 1e3,
                left=step.start * 1e3,
                height=0.7,
                color="C1" if n > 1 else "C0",
                linewidth=0,
            )
    handles = [
        Patch(color="C1", label="prompt chunk"),
        Patch(color="C0", label="decode token"),
        Line2D([], [], color="black", label="arrival"),
    ]
    ax.invert_yaxis()
    ax.set_yticks(range(len(result.requests)))
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("request")
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    return fig
