"""``llmserve-ref bench``: the benchmark client's command line, progress and report.

Its flags build a `BenchConfig` (`llmserve_ref.bench.bench_client`), it runs the load
with a progress line on stderr, prints the summary table, and writes the summary and
every request's timeline as JSON (``--json``) and the latency CDFs (``--plot``).

>>> parse_lengths("32"), parse_lengths("uniform:16:64"), parse_lengths("lognormal:100:0.5")
(Fixed(length=32), Uniform(low=16, high=64), LogNormal(median=100.0, sigma=0.5, low=1, high=32768))
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from pathlib import Path

from llmserve_ref.bench.bench_client import BenchConfig, run
from llmserve_ref.bench.bench_metrics import format_table, plot_cdfs, to_json
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import Fixed, Lengths, LogNormal, Uniform


def parse_lengths(text: str) -> Lengths:
    """The length distribution a ``--prompt-len`` or ``--output-len`` flag gives: ``N``,
    ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA``."""
    kind, *args = text.split(":")
    if not args:
        return Fixed(int(kind))
    if kind == "uniform":
        return Uniform(int(args[0]), int(args[1]))
    if kind == "lognormal":
        return LogNormal(float(args[0]), float(args[1]))
    raise argparse.ArgumentTypeError(f"not a length distribution: {text!r}")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``llmserve-ref bench``."""
    a = parser.add_argument
    a("--base-url", default="http://127.0.0.1:8000", help="server root (a trailing /v1 is ignored)")
    a("--endpoint", choices=["completions", "chat"], default="completions")
    a("--model", default="tiny")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, help="closed loop: this many users (default 1)")
    load.add_argument("--request-rate", type=float, help="open loop: requests per second")
    a("--burstiness", type=float, default=1.0, help="gamma shape of the gaps; 1 = Poisson")
    a("--max-concurrency", type=int, help="open loop: at most this many in flight")
    a("--num-requests", type=int, default=100)
    a("--duration", type=float, help="seconds; stop sending new requests after this")
    a("--warmup", type=int, default=2, help="requests sent first and not recorded")
    a("--prompt-len", type=parse_lengths, default=Fixed(32), help="N, uniform:LO:HI, lognormal:M:S")
    a("--output-len", type=parse_lengths, default=Fixed(32), help="max_tokens; same forms")
    a(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="do not send ignore_eos (for servers that reject unknown fields)",
    )
    a("--seed", type=int, default=0)
    a("--timeout", type=float, default=60.0)
    a("--slo-ttft-ms", type=float, help="goodput: TTFT target")
    a("--slo-tpot-ms", type=float, help="goodput: TPOT target")
    a("--slo-e2e-ms", type=float, help="goodput: end-to-end latency target")
    a(
        "--origin",
        choices=["sent", "scheduled"],
        default="sent",
        help="count latency from the actual or the scheduled send time",
    )
    a("--json", type=Path, help="write the summary and every request here")
    a("--plot", type=Path, help="write CDFs of TTFT, TPOT, ITL and E2E here (.svg, .png)")
    a("--no-progress", dest="progress", action="store_false")
    return parser


def main(args: argparse.Namespace) -> None:
    """Run ``llmserve-ref bench`` with parsed `args`: table on stdout, bar on stderr."""
    closed = args.request_rate is None
    config = BenchConfig(
        base_url=args.base_url,
        endpoint=args.endpoint,
        model=args.model,
        num_requests=args.num_requests,
        duration=args.duration,
        concurrency=(args.concurrency or 1) if closed else None,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        max_concurrency=args.max_concurrency,
        warmup=args.warmup,
        prompt_len=args.prompt_len,
        output_len=args.output_len,
        ignore_eos=args.ignore_eos,
        seed=args.seed,
        timeout=args.timeout,
        api_key=os.environ.get("OPENAI_API_KEY"),
    )
    slo = None
    targets_ms = (args.slo_ttft_ms, args.slo_tpot_ms, args.slo_e2e_ms)
    if any(v is not None for v in targets_ms):  # a target of 0 is a target
        slo = SLO(*(None if v is None else v / 1e3 for v in targets_ms))
    result = run(config, progress=args.progress)
    summary = result.summary(slo, args.origin)
    print(format_table(summary))
    if args.json:
        described = {k: v for k, v in asdict(config).items() if k != "api_key"}
        described |= {"prompt_len": repr(config.prompt_len), "output_len": repr(config.output_len)}
        args.json.write_text(to_json(summary, result.records, described) + "\n")
    if args.plot:
        plot_cdfs(result.records, args.origin).savefig(args.plot, bbox_inches="tight")


def cli(argv: list[str] | None = None) -> None:
    """``python -m llmserve_ref.bench.bench_cli``: the same as ``llmserve-ref bench``."""
    parser = argparse.ArgumentParser(
        prog="llmserve-ref bench", description="benchmark an OpenAI-compatible streaming endpoint"
    )
    main(add_arguments(parser).parse_args(argv))


if __name__ == "__main__":
    cli()
