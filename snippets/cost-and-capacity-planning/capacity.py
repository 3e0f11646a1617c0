"""How many GPUs does my load need, what does a million tokens cost, and when is an API cheaper?

    python capacity.py --model Llama-3.1-8B --gpu H100-SXM --rate 50 --peak-rate 80 \
        --prompt-len 1000 --output-len 200 --ttft 0.5 --tpot 0.05 \
        --gpu-hour 2.50 --api-input 0.20 --api-output 0.60

Simulates one GPU serving the model (continuous batching, its KV cache sized from
its memory, step times from the roofline scaled by an efficiency) to find the
highest request rate at which a short replay keeps 90% of requests within both
latency targets (an upper bound for steady traffic, whose queue takes longer to
build), then sizes the deployment for the peak rate and prices it at the average
one. The efficiency defaults to what vLLM measured on an H100 (MFU 0.58, MBU 0.50);
give your own engine's if you measured it. Prices are yours to give: the defaults
are examples.
"""

from __future__ import annotations

import argparse

from llmserve_ref.planning.capacity import Load, lengths, plan
from llmserve_ref.planning.hardware import gpu
from llmserve_ref.planning.model_catalog import model
from llmserve_ref.planning.roofline import VLLM_H100, Efficiency
from llmserve_ref.planning.slo import SLO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--gpu", default="H100-SXM")
    parser.add_argument("--weight-dtype", default="bf16")
    parser.add_argument("--kv-dtype", default="bf16")
    parser.add_argument("--rate", type=float, default=50.0, help="average requests per second")
    parser.add_argument(
        "--peak-rate",
        type=float,
        default=None,
        help="requests per second to size for (default: the average)",
    )
    parser.add_argument("--prompt-len", type=int, default=1000, help="median prompt tokens")
    parser.add_argument("--output-len", type=int, default=200, help="median output tokens")
    parser.add_argument(
        "--sigma",
        type=float,
        default=1.0,
        help="spread of log lengths (0: every request the median)",
    )
    parser.add_argument("--ttft", type=float, default=0.5, help="TTFT target, seconds")
    parser.add_argument("--tpot", type=float, default=0.05, help="TPOT target, seconds")
    parser.add_argument(
        "--mfu",
        type=float,
        default=VLLM_H100.mfu,
        help="share of peak FLOP/s prefill reaches (1: the roofline)",
    )
    parser.add_argument(
        "--mbu",
        type=float,
        default=VLLM_H100.mbu,
        help="share of memory bandwidth decode reaches (1: the roofline)",
    )
    parser.add_argument("--gpu-hour", type=float, default=2.50, help="$ per GPU-hour")
    parser.add_argument("--api-input", type=float, default=0.20, help="API $ per M input tokens")
    parser.add_argument("--api-output", type=float, default=0.60, help="API $ per M output tokens")
    args = parser.parse_args()

    m, g = model(args.model), gpu(args.gpu)
    load = Load(
        args.rate, lengths(args.prompt_len, args.sigma), lengths(args.output_len, args.sigma)
    )
    slo = SLO(ttft=args.ttft, tpot=args.tpot)
    p = plan(
        m,
        g,
        load,
        slo,
        gpu_hour_price=args.gpu_hour,
        api_price_per_million=(args.api_input, args.api_output),
        peak_rate=args.peak_rate,
        efficiency=Efficiency(args.mfu, args.mbu),
        weight_dtype=args.weight_dtype,
        kv_dtype=args.kv_dtype,
    )
    print(
        f"{m.name} ({args.weight_dtype} weights, {args.kv_dtype} KV) on {g.name}, "
        f"at MFU {args.mfu:g} and MBU {args.mbu:g}"
    )
    print(
        f"load: {p.rate:g} requests/s on average, {p.peak_rate:g} at the peak; median prompt "
        f"{args.prompt_len}, median output {args.output_len} tokens; targets TTFT "
        f"{args.ttft:g} s, TPOT {args.tpot * 1e3:g} ms"
    )
    print(
        f"one GPU keeps 90% in target up to {p.sustainable_rate_per_gpu:.1f} requests/s in a "
        "short replay (an upper bound for steady traffic)"
    )
    print(
        f"GPUs: {p.gpus_for_throughput} for throughput, {p.gpus_for_memory} for KV memory "
        f"-> {p.gpus}, {p.utilization:.0%} busy on average"
    )
    print(
        f"cost: ${p.dollars_per_hour:,.2f}/hour at ${args.gpu_hour:.2f}/GPU-hour, "
        f"${p.cost_per_million_output_tokens:.3f} per million output tokens"
    )
    print(
        f"API at ${args.api_input:.2f}/${args.api_output:.2f} per M input/output tokens: "
        f"${p.api_dollars_per_hour:,.2f}/hour for this load"
    )
    verdict = (
        "self-hosting is cheaper above it"
        if p.breakeven_utilization < 1
        else "one GPU cannot serve that much: the API is cheaper at this price"
    )
    print(
        f"break-even: {p.breakeven_rate:.2f} requests/s per GPU on average "
        f"({p.breakeven_utilization:.1%} busy); {verdict}"
    )


if __name__ == "__main__":
    main()
