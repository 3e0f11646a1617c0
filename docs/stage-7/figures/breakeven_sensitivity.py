"""Self-hosting against an API: how the break-even moves with utilization and with prices."""

from functools import cache

import numpy as np
from matplotlib.figure import Figure

from llmserve_ref.planning.capacity import Load, Plan, lengths, plan
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.slo import SLO

API_SCALES = (0.25, 0.5, 1.0, 2.0)  # multiples of the example API prices
GPU_HOUR_PRICES = (1.50, 2.50, 4.00)  # example $ per GPU-hour


@cache
def example_plan() -> Plan:
    """The page's worked example: Llama-3.1-8B on H100s at vLLM's measured efficiency."""
    load = Load(rate=50, prompt_len=lengths(1000, 1.0), output_len=lengths(200, 1.0))
    return plan(
        model("Llama-3.1-8B"),
        gpu("H100-SXM"),
        load,
        SLO(ttft=0.5, tpot=0.05),
        gpu_hour_price=2.50,
        api_price_per_million=(0.20, 0.60),
    )


def self_hosted_per_request(p: Plan, utilization, gpu_hour_price: float | None = None):
    """$ a request costs on GPUs that serve `utilization` of the rate they sustain."""
    price = p.gpu_hour_price if gpu_hour_price is None else gpu_hour_price
    return price / (3600 * np.asarray(utilization) * p.sustainable_rate_per_gpu)


def breakeven_utilization(p: Plan, api_scale=1.0, gpu_hour_price: float | None = None):
    """The utilization above which self-hosting is cheaper than the API at `api_scale` its price."""
    per_request_at_full_use = self_hosted_per_request(p, 1.0, gpu_hour_price)
    return per_request_at_full_use / (p.api_dollars_per_request * np.asarray(api_scale))


def figure() -> Figure:
    p = example_plan()
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    use = np.linspace(0.02, 1.0, 200)
    left.plot(
        use * 100,
        self_hosted_per_request(p, use) * 1000,
        color="black",
        label=f"self-hosted, ${p.gpu_hour_price:.2f}/GPU-hour",
    )
    for scale, color in zip(API_SCALES, ("C0", "C1", "C2", "C3"), strict=True):
        left.axhline(
            p.api_dollars_per_request * scale * 1000,
            color=color,
            linestyle="--",
            label=f"API at {scale:g}x the example price",
        )
    left.set_yscale("log")
    left.set_xlabel("utilization (% of the rate the GPUs sustain)")
    left.set_ylabel("$ per 1,000 requests")
    left.set_title("cost per request falls with utilization", fontsize=10)
    left.legend(fontsize=7)
    scales = np.geomspace(0.1, 4, 100)
    for price, color in zip(GPU_HOUR_PRICES, ("C4", "black", "C5"), strict=True):
        right.plot(
            scales,
            breakeven_utilization(p, scales, price) * 100,
            color=color,
            label=f"${price:.2f}/GPU-hour",
        )
    right.set_ylim(0, 100)
    right.set_xscale("log")
    right.set_xlabel("API price (multiple of the example)")
    right.set_ylabel("break-even utilization (%)")
    right.set_title("self-hosting pays above the curve", fontsize=10)
    right.legend(fontsize=7)
    return fig
