"""The server's own metrics for Prometheus: counted as it serves, rendered as text.

This is the server side of monitoring: what ``GET /metrics`` exposes while the server
runs, for Prometheus to scrape (the benchmark's client-side statistics, TTFT and TPOT
percentiles of one run, are `llmserve_ref.bench.bench_metrics`). It has two parts:
the metric types and the `Registry` that renders them, then `ServerMetrics`, the set
this server keeps: requests, tokens, latencies and the engine's load.

Prometheus scrapes ``GET /metrics`` and reads plain text, one sample a line,
each family introduced by ``# HELP`` and ``# TYPE``::

    # HELP llmserve_requests_total HTTP requests answered, by endpoint and status.
    # TYPE llmserve_requests_total counter
    llmserve_requests_total{endpoint="/v1/completions",status="200"} 3

A **counter** only goes up (requests, tokens); rates come from differences
between scrapes. A **gauge** is a value now (requests running). A **histogram**
counts observations into cumulative buckets (``_bucket{le="0.1"}`` is how many
were at most 0.1 s), plus their ``_sum`` and ``_count``, so that percentiles
can be estimated over any window later — a server cannot keep every latency.

The format is simple enough to write by hand, which is what this module does
(no dependency). Every update happens on the server's event loop thread, so
nothing here needs a lock.

>>> registry = Registry()
>>> ttft = registry.add(Histogram("ttft_seconds", "Time to first token.", [0.1, 1.0]))
>>> ttft.observe(0.05); ttft.observe(0.5)
>>> print(registry.render())
# HELP ttft_seconds Time to first token.
# TYPE ttft_seconds histogram
ttft_seconds_bucket{le="0.1"} 1
ttft_seconds_bucket{le="1.0"} 2
ttft_seconds_bucket{le="+Inf"} 2
ttft_seconds_sum 0.55
ttft_seconds_count 2
<BLANKLINE>
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence
from typing import TypeVar

from llmserve_ref.engine.interface import Engine

Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    escaped = (
        (k, v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")) for k, v in labels
    )
    return "{" + ",".join(f'{k}="{v}"' for k, v in escaped) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Counter:
    """A count that only goes up, one per combination of label values."""

    kind = "counter"

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help
        self.values: dict[Labels, float] = {}

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0) + amount

    def value(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0)

    def samples(self) -> list[str]:
        return [f"{self.name}{_labels(k)} {_number(v)}" for k, v in sorted(self.values.items())]


class Gauge:
    """A value read when scraped, from a function (requests running now, bytes held)."""

    kind = "gauge"

    def __init__(self, name: str, help: str, read: Callable[[], float]) -> None:
        self.name, self.help, self.read = name, help, read

    def samples(self) -> list[str]:
        return [f"{self.name} {_number(self.read())}"]


class Total(Gauge):
    """A counter kept by someone else (the engine), read when scraped."""

    kind = "counter"


class Histogram:
    """Observations counted into cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        self.name, self.help = name, help
        self.bounds = sorted(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def samples(self) -> list[str]:
        lines, total = [], 0
        for bound, n in zip([*map(repr, self.bounds), "+Inf"], self.counts, strict=True):
            total += n
            lines.append(f'{self.name}_bucket{{le="{bound}"}} {total}')
        return [*lines, f"{self.name}_sum {_number(self.sum)}", f"{self.name}_count {total}"]


M = TypeVar("M", Counter, Gauge, Histogram)


class Registry:
    """The metrics a server exposes, rendered in Prometheus' text format (version 0.0.4)."""

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self.metrics: list[Counter | Gauge | Histogram] = []

    def add(self, metric: M) -> M:
        self.metrics.append(metric)
        return metric

    def render(self) -> str:
        lines = []
        for m in self.metrics:
            lines += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}", *m.samples()]
        return "\n".join(lines) + "\n"


LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


class ServerMetrics(Registry):
    """The serving metrics: requests, tokens, TTFT and inter-token latency, engine load."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.requests = self.add(
            Counter("llmserve_requests_total", "HTTP requests answered, by endpoint and status.")
        )
        self.cancelled = self.add(
            Counter(
                "llmserve_requests_cancelled_total",
                "Generations stopped early because the client disconnected or the server stopped.",
            )
        )
        self.prompt_tokens = self.add(
            Counter("llmserve_prompt_tokens_total", "Prompt tokens prefilled.")
        )
        self.generation_tokens = self.add(
            Counter("llmserve_generation_tokens_total", "Tokens generated.")
        )
        self.ttft = self.add(
            Histogram(
                "llmserve_time_to_first_token_seconds",
                "From a request's arrival to its first generated token.",
                LATENCY_BUCKETS,
            )
        )
        self.itl = self.add(
            Histogram(
                "llmserve_inter_token_latency_seconds",
                "Between two consecutive tokens of one sequence.",
                LATENCY_BUCKETS,
            )
        )
        self.add(
            Gauge(
                "llmserve_requests_running",
                "Sequences being decoded.",
                lambda: engine.stats().running,
            )
        )
        self.add(
            Gauge(
                "llmserve_requests_waiting",
                "Sequences queued for a slot.",
                lambda: engine.stats().waiting,
            )
        )
        self.add(
            Gauge(
                "llmserve_kv_cache_bytes",
                "Bytes of KV cache held by running sequences.",
                lambda: engine.stats().kv_cache_bytes,
            )
        )
        # The engine's own counts, by `EngineStats` field (zero where an engine has no
        # blocks or prefix cache). Totals are counters: their names end in _total.
        for kind, field, help in ENGINE_STATS:
            name = f"llmserve_{field}" + ("_total" if kind is Total else "")
            self.add(kind(name, help, functools.partial(_stat, engine, field)))


def _stat(engine: Engine, field: str) -> float:
    """One field of the engine's `EngineStats`, read when /metrics is scraped."""
    return getattr(engine.stats(), field)


ENGINE_STATS = [
    (Gauge, "kv_blocks_used", "KV blocks held by sequences."),
    (Gauge, "kv_blocks_total", "KV blocks in the pool."),
    (Total, "prefix_cache_queries", "Prompt tokens looked up in the prefix cache."),
    (Total, "prefix_cache_hits", "Prompt tokens found in the prefix cache, not computed again."),
    (Total, "preemptions", "Sequences preempted (KV freed, to recompute) when blocks ran out."),
    (Total, "steps", "Forward passes the engine ran."),
    (Total, "scheduled_tokens", "Tokens those passes computed (per step: divide by steps)."),
]
