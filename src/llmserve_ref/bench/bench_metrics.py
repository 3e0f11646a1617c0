"""What an endpoint benchmark measures: per-request timelines, and the numbers made from them.

A streamed request leaves a timeline on the client: when it was due to be sent
(`scheduled`), when it was sent (`sent`), when each chunk carrying text arrived
(`chunk_times`), and the token counts the server reported in its usage chunk.
Every metric is a formula on such timelines, following `vllm bench serve`:

- **TTFT**, time to first token: first content chunk − send time.
- **E2E latency**: last content chunk − send time.
- **TPOT**, time per output token: ``(e2e − ttft) / (output_tokens − 1)``, one value
  per request with at least two tokens; the first token is excluded because it
  carries the prefill.
- **ITL**, inter-token latency: every gap between consecutive content chunks,
  pooled over all requests (``itl``), and the mean gap of each request
  (``itl_per_request``). A chunk may carry several tokens, so ITL is per chunk.
- **Throughput**: requests, output tokens, and prompt + output tokens of the
  successful requests, divided by the benchmark's duration.
- **Goodput**: successful requests per second that met every latency target of
  an `SLO`.

Each latency is summarized as `vllm bench serve` reports it: mean, median, standard
deviation and the percentiles asked for. The names are vLLM's (``e2el`` for the
end-to-end latency, ``client_queue_time`` for the wait inside the client), so that
`llmserve_ref.bench.bench_result` writes them under vLLM's keys.

With ``origin="scheduled"``, TTFT and E2E are counted from the time the request
was due rather than the time it was sent: the latency a user on a fixed schedule
sees, including any wait in the client (see "coordinated omission" on the page
"Benchmark an endpoint correctly").

>>> r = RequestRecord(0, scheduled=0.0, sent=0.0, chunk_times=[0.05, 0.07, 0.09],
...                   output_tokens=3, prompt_tokens=8, max_tokens=3)
>>> round(r.ttft(), 3), round(r.e2e(), 3), round(r.tpot(), 3), [round(g, 3) for g in r.itl()]
(0.05, 0.09, 0.02, [0.02, 0.02])
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from llmserve_ref.planning.slo import SLO

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Origin = Literal["sent", "scheduled"]


# --8<-- [start:record]
@dataclass
class RequestRecord:
    """One request's timeline, in seconds since the benchmark started, and its token counts.

    `output_tokens` and `prompt_tokens` come from the server's usage chunk; when a
    server sends none, `output_tokens` falls back to the number of content chunks
    and `usage_reported` is False. A failed request keeps its `error` message.
    """

    index: int
    scheduled: float
    sent: float
    chunk_times: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    max_tokens: int = 0
    usage_reported: bool = True
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.chunk_times)

    def start(self, origin: Origin = "sent") -> float:
        return self.sent if origin == "sent" else self.scheduled

    def ttft(self, origin: Origin = "sent") -> float:
        """Time to first token: the first chunk with text, minus the send (or due) time."""
        return self.chunk_times[0] - self.start(origin)

    def e2e(self, origin: Origin = "sent") -> float:
        """End-to-end latency: the last chunk with text, minus the send (or due) time."""
        return self.chunk_times[-1] - self.start(origin)

    def tpot(self) -> float:
        """Time per output token after the first; NaN for fewer than two tokens."""
        if self.output_tokens < 2:
            return math.nan
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.output_tokens - 1)

    def itl(self) -> list[float]:
        """Every gap between consecutive chunks with text (one per chunk, not per token)."""
        return np.diff(self.chunk_times).tolist()

    def meets(self, slo: SLO, origin: Origin = "sent") -> bool:
        """Whether the request succeeded and met every latency target of `slo`."""
        return self.ok and slo.met_by(self.ttft(origin), self.tpot(), self.e2e(origin))


# --8<-- [end:record]


# --8<-- [start:stats]
# The tail percentiles reported beside the median: the default of --metric-percentiles here
# (vLLM's own default is in llmserve_ref.planning.published).
PERCENTILES: tuple[float, ...] = (90, 95, 99)


@dataclass(frozen=True)
class Stats:
    """Mean, median, standard deviation and tail percentiles of one metric, in seconds.

    Percentiles interpolate linearly between order statistics (numpy's default, as
    vLLM reports them): the p99 of 100 values lies between the 99th and 100th. The
    standard deviation is numpy's (of the values, not of a sample), as vLLM's. Every
    statistic is NaN when there are no values.

    >>> s = Stats.of([0.1, 0.2, 0.3, 0.4], percentiles=(50, 99))
    >>> s.median, round(s.std, 4), s.percentiles[99]
    (0.25, 0.1118, 0.397)
    """

    count: int
    mean: float
    median: float
    std: float
    percentiles: dict[float, float]  # {99: p99, ...}

    @classmethod
    def of(cls, values: Sequence[float], percentiles: Sequence[float] = PERCENTILES) -> Stats:
        data = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
        if data.size == 0:
            return cls(0, math.nan, math.nan, math.nan, dict.fromkeys(percentiles, math.nan))
        tails = {p: float(np.percentile(data, p)) for p in percentiles}
        return cls(
            int(data.size), float(data.mean()), float(np.median(data)), float(data.std()), tails
        )


# --8<-- [end:stats]


@dataclass(frozen=True)
class Summary:
    """The aggregate of a benchmark run: counts, throughputs and latency distributions.

    The names are those of `vllm bench serve`'s result (``total_input_tokens``,
    ``request_goodput``, ``e2el``, ...); `short`, `without_usage`, `errors` and
    `itl_per_request` are this client's own.
    """

    origin: Origin
    duration: float
    completed: int
    failed: int
    errors: dict[str, int]  # each failure's message, and how many times it came
    short: int  # successful requests that stopped before their max_tokens
    without_usage: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    slo: SLO | None
    ttft: Stats
    tpot: Stats
    itl: Stats
    itl_per_request: Stats
    e2el: Stats
    client_queue_time: Stats  # sent − scheduled: the wait inside the client


def summarize(
    records: Sequence[RequestRecord],
    duration: float,
    slo: SLO | None = None,
    origin: Origin = "sent",
    percentiles: Sequence[float] = PERCENTILES,
) -> Summary:
    """Aggregate `records` of a run that lasted `duration` seconds.

    Latencies come from successful requests only; failures are counted and their
    messages tallied. Throughputs count what successful requests returned.
    """
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    prompt = sum(r.prompt_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)

    def stats(values: Sequence[float]) -> Stats:
        return Stats.of(values, percentiles)

    return Summary(
        origin=origin,
        duration=duration,
        completed=len(ok),
        failed=len(failed),
        errors=dict(Counter(r.error or "no content in the response" for r in failed)),
        short=sum(r.output_tokens < r.max_tokens for r in ok),
        without_usage=sum(not r.usage_reported for r in ok),
        total_input_tokens=prompt,
        total_output_tokens=output,
        request_throughput=len(ok) / duration,
        request_goodput=None if slo is None else sum(r.meets(slo, origin) for r in ok) / duration,
        output_throughput=output / duration,
        total_token_throughput=(prompt + output) / duration,
        slo=slo,
        ttft=stats([r.ttft(origin) for r in ok]),
        tpot=stats([r.tpot() for r in ok]),
        itl=stats([gap for r in ok for gap in r.itl()]),
        itl_per_request=stats([float(np.mean(r.itl())) for r in ok if len(r.chunk_times) > 1]),
        e2el=stats([r.e2e(origin) for r in ok]),
        client_queue_time=stats([r.sent - r.scheduled for r in ok]),
    )


# The metrics a summary can report percentiles of (vLLM's --percentile-metrics), labelled
# for the table: vLLM's names, and this client's per-request mean of ITL.
METRICS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL (pooled)",
    "itl_per_request": "ITL (per-request mean)",
    "e2el": "E2E latency",
    "client_queue_time": "client queue time",
}
# What this client reports by default: more than vLLM does (planning.published has vLLM's).
DEFAULT_METRICS = ("ttft", "tpot", "itl", "itl_per_request", "e2el")


def format_table(s: Summary, metrics: Sequence[str] = DEFAULT_METRICS) -> str:
    """A fixed-width table of a summary: counts and throughputs, then `metrics` in ms."""
    lines = [
        f"{'successful requests':<32}{s.completed:>12}",
        f"{'failed requests':<32}{s.failed:>12}",
        f"{'duration (s)':<32}{s.duration:>12.2f}",
        f"{'total input tokens':<32}{s.total_input_tokens:>12}",
        f"{'total output tokens':<32}{s.total_output_tokens:>12}",
        f"{'request throughput (req/s)':<32}{s.request_throughput:>12.2f}",
        f"{'output throughput (tok/s)':<32}{s.output_throughput:>12.1f}",
        f"{'total token throughput (tok/s)':<32}{s.total_token_throughput:>12.1f}",
    ]
    if s.request_goodput is not None:
        lines.append(f"{'request goodput (req/s)':<32}{s.request_goodput:>12.2f}")
    tails = list(s.ttft.percentiles)
    lines.append(
        f"{'latency (ms), from ' + s.origin:<32}{'mean':>9}{'median':>9}{'std':>9}"
        + "".join(f"{f'p{p:g}':>9}" for p in tails)
    )
    for name in metrics:
        st: Stats = getattr(s, name)
        values = (st.mean, st.median, st.std, *(st.percentiles[p] for p in tails))
        lines.append(f"{METRICS[name]:<32}" + "".join(f"{v * 1e3:>9.1f}" for v in values))
    for message, count in s.errors.items():
        lines.append(f"error x{count}: {message}")
    if s.short:
        lines.append(f"note: {s.short} requests stopped before max_tokens")
    if s.without_usage:
        lines.append(f"note: {s.without_usage} responses had no usage; tokens counted by chunk")
    return "\n".join(lines)


def plot_cdfs(records: Sequence[RequestRecord], origin: Origin = "sent") -> Figure:
    """Empirical CDFs of TTFT, TPOT, ITL (pooled) and E2E latency of the successful requests."""
    from matplotlib.figure import Figure

    ok = [r for r in records if r.ok]
    panels = {
        "TTFT": [r.ttft(origin) for r in ok],
        "TPOT": [t for r in ok if not math.isnan(t := r.tpot())],
        "ITL (every gap)": [gap for r in ok for gap in r.itl()],
        "E2E latency": [r.e2e(origin) for r in ok],
    }
    fig = Figure(figsize=(9, 5.5), layout="constrained")
    for ax, (name, values) in zip(fig.subplots(2, 2).flat, panels.items(), strict=True):
        xs = np.sort(np.asarray(values) * 1e3)
        ax.step(xs, np.arange(1, xs.size + 1) / max(xs.size, 1), where="post")
        for q in (50, 99):
            if xs.size:
                ax.axvline(np.percentile(xs, q), color="grey", linestyle=":", linewidth=0.8)
        ax.set_title(f"{name} ({xs.size} values)", fontsize=10)
        ax.set_xlabel("ms (dotted: median and p99)")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3)
    fig.axes[0].set_ylabel("fraction of values ≤ x")
    fig.axes[2].set_ylabel("fraction of values ≤ x")
    return fig
