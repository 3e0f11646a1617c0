"""``llmserve-ref bench``: the benchmark client's command line, progress and report.

It speaks `vllm bench serve` (vLLM 0.32): the flags a reader knows from there have the
same names and the same meanings (`llmserve_ref.planning.published` has vLLM's own
defaults). ``--request-rate`` (default inf) and ``--max-concurrency`` set the load, so
``--max-concurrency 4`` alone is a closed loop of 4 users; ``--num-prompts``,
``--num-warmups``, ``--input-len``, ``--output-len``, ``--ignore-eos``, the sampling
flags (``--temperature``, ``--top-p``, ...), ``--goodput ttft:500 tpot:50`` (ms),
``--percentile-metrics``, ``--metric-percentiles``, ``--save-result``, ``--result-dir``,
``--result-filename``, ``--save-detailed``, ``--disable-tqdm``. What vLLM has no flag
for is this client's own: length distributions (``--input-len uniform:16:64``,
``lognormal:100:0.5``), ``--no-ignore-eos``, ``--duration``, ``--timeout``, ``--origin``
and ``--plot``.

The flags build a `BenchConfig` (`llmserve_ref.bench.bench_client`); the run prints the
summary table, draws a progress bar on stderr when stderr is a terminal, saves the
result file (`llmserve_ref.bench.bench_result`) and the latency CDFs (``--plot``).

>>> parse_lengths("32"), parse_lengths("uniform:16:64"), parse_lengths("lognormal:100:0.5")
(Fixed(length=32), Uniform(low=16, high=64), LogNormal(median=100.0, sigma=0.5, low=1, high=32768))
>>> parse_goodput("ttft:500"), parse_percentiles("50,99.9")
(('ttft', 500.0), (50.0, 99.9))
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from llmserve_ref.bench.bench_client import BenchConfig, run
from llmserve_ref.bench.bench_metrics import DEFAULT_METRICS, METRICS, format_table, plot_cdfs
from llmserve_ref.bench.bench_result import result_filename, to_result, write_result
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import Fixed, Lengths, LogNormal, Uniform

# vLLM's sampling flags: each is sent in the request body only when given.
SAMPLING = {
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "min_p": float,
    "frequency_penalty": float,
    "presence_penalty": float,
    "repetition_penalty": float,
}


def parse_lengths(text: str) -> Lengths:
    """The length distribution a ``--input-len`` or ``--output-len`` flag gives: ``N``,
    ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA``."""
    kind, *args = text.split(":")
    if not args:
        return Fixed(int(kind))
    if kind == "uniform":
        return Uniform(int(args[0]), int(args[1]))
    if kind == "lognormal":
        return LogNormal(float(args[0]), float(args[1]))
    raise argparse.ArgumentTypeError(f"not a length distribution: {text!r}")


def parse_goodput(text: str) -> tuple[str, float]:
    """One ``--goodput`` target, ``KEY:VALUE`` in ms, KEY one of ttft, tpot, e2el (vLLM's)."""
    name, _, value = text.partition(":")
    try:
        target = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not KEY:VALUE (ms): {text!r}") from None
    if name not in ("ttft", "tpot", "e2el") or target < 0:
        raise argparse.ArgumentTypeError(f"not ttft, tpot or e2el with a target >= 0: {text!r}")
    return name, target


def parse_metrics(text: str) -> tuple[str, ...]:
    """``--percentile-metrics``: comma-separated names of `METRICS`."""
    names = tuple(text.split(","))
    if unknown := [n for n in names if n not in METRICS]:
        raise argparse.ArgumentTypeError(f"unknown metrics {unknown}; choose from {list(METRICS)}")
    return names


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``--metric-percentiles``: comma-separated percentiles between 0 and 100."""
    values = tuple(float(p) for p in text.split(","))
    if not all(0 <= p <= 100 for p in values):
        raise argparse.ArgumentTypeError(f"percentiles lie between 0 and 100: {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``llmserve-ref bench``: vLLM's names first, then this client's own."""
    a = parser.add_argument
    a("--backend", choices=["openai", "openai-chat"], default="openai")
    a("--base-url", help="server root; default http://HOST:PORT (a trailing /v1 is ignored)")
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=8000)
    a("--endpoint", help="API path (default: /v1/completions, or /v1/chat/completions)")
    a("--model", help="default: the first model the server lists at /v1/models")
    a("--request-rate", type=float, default=math.inf, help="requests/s; inf: all at once")
    a("--burstiness", type=float, default=1.0, help="gamma shape of the gaps; 1 = Poisson")
    a("--max-concurrency", type=int, help="at most this many in flight; alone: N users")
    a("--num-prompts", type=int, default=100)
    a("--num-warmups", type=int, default=0, help="requests sent first and not recorded")
    a("--input-len", type=parse_lengths, default=Fixed(32), help="N, uniform:LO:HI, lognormal:M:S")
    a("--output-len", type=parse_lengths, default=Fixed(32), help="max_tokens; same forms")
    a("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    sampling = parser.add_argument_group("sampling parameters (sent only when given)")
    for name, kind in SAMPLING.items():
        sampling.add_argument(f"--{name.replace('_', '-')}", type=kind)
    a("--extra-body", type=json.loads, help="JSON merged into every request")
    a("--seed", type=int, default=0)
    a("--goodput", nargs="+", type=parse_goodput, help="SLO targets in ms: ttft:500 tpot:50")
    a("--percentile-metrics", type=parse_metrics, default=DEFAULT_METRICS)
    a("--metric-percentiles", type=parse_percentiles, default=(90.0, 95.0, 99.0))
    a("--save-result", action="store_true", help="write the result file")
    a("--save-detailed", action="store_true", help="with every request's values")
    a("--result-dir", type=Path)
    a("--result-filename", help="default: LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json")
    a("--label", help="the result file name's prefix (default: the backend)")
    a("--disable-tqdm", action="store_true", help="no progress bar")
    a("--duration", type=float, help="seconds; stop sending new requests after this")
    a("--timeout", type=float, default=60.0)
    a("--origin", choices=["sent", "scheduled"], default="sent", help="latency counted from")
    a("--plot", type=Path, help="write CDFs of TTFT, TPOT, ITL and E2E here (.svg, .png)")
    return parser


def bench_config(args: argparse.Namespace) -> BenchConfig:
    """The `BenchConfig` that `args` describe; the API key from ``OPENAI_API_KEY``, as vLLM's."""
    sampling = {k: v for k in SAMPLING if (v := getattr(args, k)) is not None}
    return BenchConfig(
        base_url=args.base_url or f"http://{args.host}:{args.port}",
        backend=args.backend,
        endpoint=args.endpoint,
        model=args.model,
        num_prompts=args.num_prompts,
        duration=args.duration,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        max_concurrency=args.max_concurrency,
        num_warmups=args.num_warmups,
        input_len=args.input_len,
        output_len=args.output_len,
        ignore_eos=args.ignore_eos,
        seed=args.seed,
        timeout=args.timeout,
        api_key=os.environ.get("OPENAI_API_KEY"),
        extra_body={**sampling, **(args.extra_body or {})},
    )


def goodput_slo(targets: list[tuple[str, float]] | None) -> SLO | None:
    """The SLO that ``--goodput`` pairs (ms) give, in seconds; None without any."""
    if not targets:
        return None
    seconds = {name: value / 1e3 for name, value in targets}
    return SLO(seconds.get("ttft"), seconds.get("tpot"), seconds.get("e2el"))


class Progress:
    """A one-line progress bar on a stream (stderr by default), redrawn at most 10 times a
    second with carriage returns: for a terminal, which is where the command draws it.

    >>> import io
    >>> out = io.StringIO()
    >>> bar = Progress(4, out)
    >>> bar.advance(); bar.advance(); bar.close()
    >>> out.getvalue().split("\\r")[-1]
    'bench [##########----------] 2/4 requests ... s\\n'
    """

    def __init__(self, total: int | None, stream: TextIO | None = None) -> None:
        self.total, self.stream = total, stream or sys.stderr
        self.done, self.start, self.drawn = 0, time.perf_counter(), 0.0

    def advance(self, *_: object) -> None:
        self.done += 1
        if time.perf_counter() - self.drawn > 0.1:
            self.draw()

    def draw(self) -> None:
        self.drawn = time.perf_counter()
        elapsed = self.drawn - self.start
        if self.total:
            filled = round(20 * self.done / self.total)
            bar = f"[{'#' * filled}{'-' * (20 - filled)}] {self.done}/{self.total}"
        else:
            bar = f"{self.done}"
        self.stream.write(f"\rbench {bar} requests {elapsed:.1f} s")
        self.stream.flush()

    def close(self) -> None:
        self.draw()
        self.stream.write("\n")


def main(args: argparse.Namespace) -> None:
    """Run ``llmserve-ref bench`` with parsed `args`: the table on stdout, a progress bar
    on stderr if it is a terminal, the result file and the plot if asked."""
    config = bench_config(args)
    show = not args.disable_tqdm and sys.stderr.isatty()
    bar = Progress(config.num_prompts if config.duration is None else None) if show else None
    result = run(config, bar.advance if bar else None)
    if bar:
        bar.close()
    summary = result.summary(goodput_slo(args.goodput), args.origin, args.metric_percentiles)
    print(format_table(summary, args.percentile_metrics))
    if args.save_result:
        metrics, detailed = args.percentile_metrics, args.save_detailed
        document = to_result(result, summary, metrics, detailed, args.label)
        path = Path(args.result_filename or result_filename(document))
        write_result(document, args.result_dir / path if args.result_dir else path)
    if args.plot:
        plot_cdfs(result.records, args.origin).savefig(args.plot, bbox_inches="tight")


def cli(argv: list[str] | None = None) -> None:
    """``python -m llmserve_ref.bench.bench_cli``: the same as ``llmserve-ref bench``."""
    parser = argparse.ArgumentParser(
        prog="llmserve-ref bench",
        description="benchmark an OpenAI-compatible streaming endpoint, as vllm bench serve does",
    )
    main(add_arguments(parser).parse_args(argv))


if __name__ == "__main__":
    cli()
