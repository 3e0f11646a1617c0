"""The result file of a benchmark run, in the format `vllm bench serve --save-result` writes.

One flat JSON object, latencies in milliseconds, under vLLM's keys: the run's setup
(``backend``, ``model_id``, ``num_prompts``, ``request_rate``, ``max_concurrency``, ...),
its counts and throughputs (``completed``, ``failed``, ``total_input_tokens``,
``total_output_tokens``, ``request_throughput``, ``request_goodput``,
``output_throughput``, ``total_token_throughput``, ``duration`` in seconds), and for
every metric asked for its ``mean_*_ms``, ``median_*_ms``, ``std_*_ms`` and one
``p{P}_*_ms`` per percentile. With ``--save-detailed`` it adds vLLM's per-request lists
(``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``latencies``, ``start_times``,
``queue_times``, ``errors``, in seconds, an empty error for a success; not vLLM's
``generated_texts``, as this client keeps no text, nor its peak-throughput, audio and
speculative-decoding figures). Beside them this client writes what it has and
vLLM has not: the load's `origin`, the `short` and `without_usage` counts, the failures'
messages counted (``error_counts``), the goodput's targets in ms (``goodput``), the
whole configuration (``config``) and, detailed, every request's timeline (``requests``).

So a script that reads vLLM's files reads ours, and `read_result` reads both into the
same `SavedResult`:

>>> document = {"completed": 3, "failed": 0, "total_input_tokens": 96,
...             "total_output_tokens": 48, "duration": 1.5, "request_throughput": 2.0,
...             "request_goodput": None, "output_throughput": 32.0,
...             "total_token_throughput": 96.0, "median_ttft_ms": 41.5, "p99_ttft_ms": 60.2}
>>> saved = SavedResult.of(document)
>>> saved.completed, saved.latencies_ms
(3, {'median_ttft_ms': 41.5, 'p99_ttft_ms': 60.2})
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from llmserve_ref.bench.bench_client import BenchResult
from llmserve_ref.bench.bench_metrics import DEFAULT_METRICS, Origin, Stats, Summary
from llmserve_ref.planning.slo import SLO

# The keys every result file holds, vLLM's and ours, in vLLM's order.
COUNTS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
)
LATENCY_KEY = re.compile(r"(mean|median|std|p\d+(\.\d+)?)_(\w+)_ms")


def percentile_key(metric: str, p: float) -> str:
    """vLLM's key for a percentile: ``p99_ttft_ms``, ``p99.9_ttft_ms``.

    >>> percentile_key("ttft", 99.0), percentile_key("itl", 99.9)
    ('p99_ttft_ms', 'p99.9_itl_ms')
    """
    return f"p{int(p) if int(p) == p else p}_{metric}_ms"


def latencies_ms(summary: Summary, metrics: Sequence[str]) -> dict[str, float | None]:
    """Each of `metrics` as vLLM writes it: mean, median, std and percentiles, in ms
    (None where there were no values)."""
    out: dict[str, float | None] = {}
    for metric in metrics:
        st: Stats = getattr(summary, metric)
        out[f"mean_{metric}_ms"] = st.mean
        out[f"median_{metric}_ms"] = st.median
        out[f"std_{metric}_ms"] = st.std
        out |= {percentile_key(metric, p): v for p, v in st.percentiles.items()}
    return {k: None if v is None or math.isnan(v) else v * 1e3 for k, v in out.items()}


def details(result: BenchResult, origin: Origin) -> dict[str, Any]:
    """vLLM's per-request lists (``--save-detailed``), in seconds, and ours (``requests``)."""
    records = result.records
    return {
        "input_lens": [r.prompt_tokens for r in records],
        "output_lens": [r.output_tokens if r.ok else 0 for r in records],
        "ttfts": [r.ttft(origin) if r.ok else 0.0 for r in records],
        "itls": [r.itl() if r.ok else [] for r in records],
        "latencies": [r.e2e(origin) if r.ok else 0.0 for r in records],
        "start_times": [r.start(origin) for r in records],
        "queue_times": [r.sent - r.scheduled for r in records],
        "errors": ["" if r.ok else r.error or "" for r in records],
        "requests": [asdict(r) for r in records],
    }


def to_result(
    result: BenchResult,
    summary: Summary,
    metrics: Sequence[str] = DEFAULT_METRICS,
    detailed: bool = False,
    label: str | None = None,
) -> dict[str, Any]:
    """The run as `vllm bench serve --save-result` writes it, with this client's fields beside."""
    config = result.config
    s = summary
    document: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": config.backend,
        "backend": config.backend,
        "label": label,
        "model_id": config.model,
        "tokenizer_id": "tiny",  # the prompts are cut with the tiny models' tokenizer
        "num_prompts": config.num_prompts,
        "request_rate": "inf" if math.isinf(config.request_rate) else config.request_rate,
        "burstiness": config.burstiness,
        "max_concurrency": config.max_concurrency,
    }
    document |= {key: getattr(s, key) for key in COUNTS}
    document |= latencies_ms(s, metrics)
    document |= {
        "origin": s.origin,
        "short": s.short,
        "without_usage": s.without_usage,
        "error_counts": s.errors,
        "goodput": None if s.slo is None else goodput_ms(s.slo),
        "config": describe(result),
    }
    if detailed:
        document |= details(result, s.origin)
    return document


def goodput_ms(slo: SLO) -> dict[str, float]:
    """An SLO's targets as ``--goodput`` gives them: vLLM's names, in ms.

    >>> goodput_ms(SLO(ttft=0.5, e2e=2.0))
    {'ttft': 500.0, 'e2el': 2000.0}
    """
    targets = {"ttft": slo.ttft, "tpot": slo.tpot, "e2el": slo.e2e}
    return {name: target * 1e3 for name, target in targets.items() if target is not None}


def describe(result: BenchResult) -> dict[str, Any]:
    """The configuration that ran, as JSON values, without the API key."""
    config = result.config
    described = {k: v for k, v in asdict(config).items() if k != "api_key"}
    described |= {"input_len": repr(config.input_len), "output_len": repr(config.output_len)}
    described["request_rate"] = "inf" if math.isinf(config.request_rate) else config.request_rate
    return described


def result_filename(document: Mapping[str, Any]) -> str:
    """The file name `vllm bench serve` gives a result: label (or backend), request rate,
    concurrency, model and date.

    >>> result_filename({"label": None, "backend": "openai", "request_rate": "inf",
    ...                  "max_concurrency": 4, "model_id": "tiny", "date": "20250101-120000"})
    'openai-infqps-concurrency4-tiny-20250101-120000.json'
    """
    label = document["label"] or document["backend"]
    rate = float(document["request_rate"])
    cap = document["max_concurrency"]
    concurrency = f"-concurrency{cap}" if cap is not None else ""
    model = str(document["model_id"]).split("/")[-1]
    return f"{label}-{rate}qps{concurrency}-{model}-{document['date']}.json"


def write_result(document: Mapping[str, Any], path: Path) -> None:
    """Write `document` as standard JSON (NaN is not JSON: undefined values are null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_finite(document), allow_nan=False) + "\n", encoding="utf-8")


def _finite(value: object) -> object:
    """`value` with every NaN replaced by None."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


@dataclass(frozen=True)
class SavedResult:
    """What a result file of either client says: counts and throughputs, every latency
    key in ms, and the per-request output lengths and errors where it was saved detailed."""

    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    duration: float  # seconds
    request_throughput: float
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    latencies_ms: dict[str, float | None]  # {"median_ttft_ms": ..., "p99_itl_ms": ...}
    output_lens: tuple[int, ...] | None = None
    errors: tuple[str, ...] | None = None

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> SavedResult:
        """Read a result as `vllm bench serve` returns or saves it, or as this client does."""
        missing = [key for key in COUNTS if key not in document]
        if missing:
            raise ValueError(f"not a benchmark result: no {', '.join(missing)}")
        latencies = {k: v for k, v in document.items() if LATENCY_KEY.fullmatch(k)}
        lens, errors = document.get("output_lens"), document.get("errors")
        return cls(
            **{key: document[key] for key in COUNTS},
            latencies_ms=latencies,
            output_lens=None if lens is None else tuple(lens),
            errors=None if errors is None else tuple(e or "" for e in errors),
        )

    def successful_output_lens(self) -> tuple[int, ...]:
        """The output length of each successful request (needs a detailed result)."""
        if self.output_lens is None or self.errors is None:
            raise ValueError("the result was not saved with --save-detailed")
        return tuple(n for n, error in zip(self.output_lens, self.errors, strict=True) if not error)


def read_result(path: str | Path) -> SavedResult:
    """Read the result file of `vllm bench serve --save-result` or of ``llmserve-ref bench``."""
    return SavedResult.of(json.loads(Path(path).read_text(encoding="utf-8")))
