"""Prometheus' text format, written by hand: counters, gauges, histograms, a registry.

This is how a server exposes what it counts (``GET /metrics``) for Prometheus to scrape:
plain text, one sample a line, each family introduced by ``# HELP`` and ``# TYPE``::

    # HELP llmserve:generation_tokens_total Number of generation tokens processed.
    # TYPE llmserve:generation_tokens_total counter
    llmserve:generation_tokens_total{engine="0",model_name="tiny"} 32

A **counter** only goes up (requests, tokens); its name ends in ``_total`` (written by
the metric, as ``prometheus_client`` does), and rates come from differences between
scrapes. A **gauge** is a value now (requests running). A
**histogram** counts observations into cumulative buckets (``_bucket{le="0.1"}`` is how
many were at most 0.1 s), plus their ``_sum`` and ``_count``, so that percentiles can be
estimated over any window later: a server cannot keep every latency. Every sample
carries the registry's constant labels (vLLM's ``model_name`` and ``engine``) and its own;
an **info** series is a gauge of 1 whose labels carry a configuration.

The format is simple enough to write by hand, which is what this module does (no
dependency; the tests read it back with ``prometheus_client``'s parser). Every update
happens on the server's event loop thread, so nothing here needs a lock.

>>> registry = Registry(model_name="tiny")
>>> ttft = registry.add(Histogram("ttft_seconds", "Time to first token.", [0.1, 1.0]))
>>> ttft.observe(0.05); ttft.observe(0.5)
>>> print(registry.render())
# HELP ttft_seconds Time to first token.
# TYPE ttft_seconds histogram
ttft_seconds_bucket{le="0.1",model_name="tiny"} 1
ttft_seconds_bucket{le="1.0",model_name="tiny"} 2
ttft_seconds_bucket{le="+Inf",model_name="tiny"} 2
ttft_seconds_sum{model_name="tiny"} 0.55
ttft_seconds_count{model_name="tiny"} 2
<BLANKLINE>
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    escaped = (
        (k, v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
        for k, v in sorted(labels)
    )
    return "{" + ",".join(f'{k}="{v}"' for k, v in escaped) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _bound(value: float) -> str:
    """A bucket's edge as ``prometheus_client`` writes it (``1.0``, not ``1``), so that a
    query for ``le="1.0"`` written against vLLM finds ours."""
    return repr(float(value))


def _key(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


class Counter:
    """A count that only goes up, one per combination of its labels' values."""

    kind = "counter"

    def __init__(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        preset: Iterable[Mapping[str, str]] = (),
    ) -> None:
        """`labels`: the names each count is kept by (none: one count, shown from the
        start). `preset`: combinations shown at 0 before they first count (as vLLM shows
        every ``finished_reason``), so a dashboard sees the series from the start."""
        self.name, self.help, self.label_names = name + "_total", help, tuple(sorted(labels))
        self.values: dict[Labels, float] = {} if labels else {(): 0}
        for combination in preset:
            self.values[self._key(combination)] = 0

    def _key(self, labels: Mapping[str, str]) -> Labels:
        if tuple(sorted(labels)) != self.label_names:
            raise ValueError(f"{self.name} counts by {self.label_names}, not {tuple(labels)}")
        return _key(labels)

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = self._key(labels)
        self.values[key] = self.values.get(key, 0) + amount

    def value(self, **labels: str) -> float:
        return self.values.get(self._key(labels), 0)

    def samples(self, const: Labels) -> list[str]:
        return [
            f"{self.name}{_labels(const + k)} {_number(v)}" for k, v in sorted(self.values.items())
        ]


class Gauge:
    """A value read when scraped, from a function (requests running now, cache usage)."""

    kind = "gauge"

    def __init__(self, name: str, help: str, read: Callable[[], float]) -> None:
        self.name, self.help, self.read = name, help, read

    def samples(self, const: Labels) -> list[str]:
        return [f"{self.name}{_labels(const)} {_number(self.read())}"]


class Total(Gauge):
    """A counter kept by someone else (the engine), read when scraped."""

    kind = "counter"

    def __init__(self, name: str, help: str, read: Callable[[], float]) -> None:
        super().__init__(name + "_total", help, read)


class Totals:
    """Counters kept by someone else, one per value of a label (vLLM's accepted tokens per
    ``position``), read when scraped: `read` gives the counts for values 0, 1, 2, ..."""

    kind = "counter"

    def __init__(
        self, name: str, help: str, label: str, read: Callable[[], Sequence[float]]
    ) -> None:
        self.name, self.help, self.label, self.read = name + "_total", help, label, read

    def samples(self, const: Labels) -> list[str]:
        return [
            f"{self.name}{_labels((*const, (self.label, str(i))))} {_number(v)}"
            for i, v in enumerate(self.read())
        ]


class Info:
    """A configuration as labels on a gauge of 1 (vLLM's ``cache_config_info``)."""

    kind = "gauge"

    def __init__(self, name: str, help: str, labels: Mapping[str, object]) -> None:
        self.name, self.help = name, help
        self.labels: Labels = _key({k: str(v) for k, v in labels.items()})

    def samples(self, const: Labels) -> list[str]:
        return [f"{self.name}{_labels(const + self.labels)} 1"]


class Histogram:
    """Observations counted into cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        self.name, self.help = name, help
        self.bounds = sorted(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)

    def samples(self, const: Labels) -> list[str]:
        lines, total = [], 0
        for bound, n in zip([*map(_bound, self.bounds), "+Inf"], self.counts, strict=True):
            total += n
            lines.append(f"{self.name}_bucket{_labels((*const, ('le', bound)))} {total}")
        return [
            *lines,
            f"{self.name}_sum{_labels(const)} {_number(self.sum)}",
            f"{self.name}_count{_labels(const)} {total}",
        ]


class TallyHistogram(Histogram):
    """A histogram of a tally someone else keeps (how many steps ran each number of tokens),
    bucketed when scraped."""

    def __init__(
        self, name: str, help: str, buckets: Sequence[float], read: Callable[[], Mapping[int, int]]
    ) -> None:
        super().__init__(name, help, buckets)
        self.read = read

    def samples(self, const: Labels) -> list[str]:
        fresh = Histogram(self.name, self.help, self.bounds)
        for value, times in self.read().items():
            fresh.observe(value, times)
        return fresh.samples(const)


M = TypeVar("M", Counter, Gauge, Histogram, Info, Totals)


class Registry:
    """The metrics a server exposes, rendered in Prometheus' text format (version 0.0.4),
    every sample with the constant labels given here (or the ones its metric was added
    with)."""

    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, **const_labels: str) -> None:
        self.metrics: list[tuple[Counter | Gauge | Histogram | Info | Totals, Labels]] = []
        self.const: Labels = _key(const_labels)

    def add(self, metric: M, const: Iterable[str] | None = None) -> M:
        """Expose `metric`, with the constant labels named in `const` (default: all)."""
        names = set(const) if const is not None else {k for k, _ in self.const}
        self.metrics.append((metric, tuple((k, v) for k, v in self.const if k in names)))
        return metric

    def render(self) -> str:
        lines = []
        for m, const in self.metrics:
            lines += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}"]
            lines += m.samples(const)
        return "\n".join(lines) + "\n"
