"""What this server counts for Prometheus, in vLLM's vocabulary under our prefix.

A reader who learns to watch our server should be able to watch vLLM's with the same
dashboards and alerts. So every series here is one of vLLM's (its ``vllm/v1/metrics/
loggers.py``, 0.32): the same name after the prefix (``llmserve:`` for ``vllm:``), the
same type, the same labels (``model_name`` and ``engine`` on every sample,
``finished_reason`` on ``request_success``) and vLLM's bucket edges
(`llmserve_ref.planning.published.VLLM_METRIC_BUCKETS`), with finer edges added below
vLLM's smallest where latencies on a CPU fall (vLLM's inter-token buckets start at 10 ms;
ours run at a few). A dashboard made for vLLM works after swapping the prefix; the
engines session checks every vLLM series against ours (or names why it does not apply).

* the engine's KV cache as configured (``cache_config_info``: its block size, blocks,
  tokens, and how many full-length requests they hold);
* the engine's load, read when scraped: requests running and waiting, KV cache usage
  (a fraction of its blocks), preemptions and prefix-cache queries and hits, and the
  tokens of each step (``iteration_tokens_total``);
* each request, counted when it ends: its tokens (prompt, generated, found cached, and
  computed at prefill), its finish reason, its times (queue, prefill, decode, inference,
  end to end, to the first token, per output token, between tokens), its preemptions;
* each HTTP answer, by route, method and status class (``http_requests_total``, as vLLM's
  instrumentator counts them, without the model's labels).

>>> from llmserve_ref.engine.interface import EngineStats
>>> class Idle:  # an engine with nothing to do
...     max_model_len = 256
...     cache_config = {"block_size": 16}
...     speculative_config = None  # it does not guess
...     def stats(self):
...         return EngineStats(running=0, waiting=0, kv_cache_bytes=0, kv_blocks_total=64)
>>> text = ServerMetrics(Idle(), "tiny").render()
>>> print("\\n".join(text.splitlines()[:3]))
# HELP llmserve:num_requests_running Number of requests in model execution batches.
# TYPE llmserve:num_requests_running gauge
llmserve:num_requests_running{engine="0",model_name="tiny"} 0
"""

from __future__ import annotations

import functools
from typing import Any

from llmserve_ref.engine.interface import Engine, FinishReason, RequestTimes
from llmserve_ref.planning.published import VLLM_METRIC_BUCKETS as VLLM
from llmserve_ref.serving.prometheus import (
    Counter,
    Gauge,
    Histogram,
    Info,
    Registry,
    TallyHistogram,
    Total,
    Totals,
)

PREFIX = "llmserve:"
# Below vLLM's smallest edges, where a CPU's latencies fall: tokens a few ms apart, requests
# that queue for milliseconds and end in tenths of a second.
FINER_GAPS = (0.001, 0.0025, 0.005, 0.0075)
FINER_REQUEST_TIMES = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2)
LATENCY_BUCKETS = (*FINER_REQUEST_TIMES, *VLLM.request_latency)
GAP_BUCKETS = (*FINER_GAPS, *VLLM.inter_token_latency)


def one_two_five(limit: int) -> list[float]:
    """vLLM's buckets for a request's token counts: 1, 2, 5, 10, 20, 50, ... up to `limit`.

    >>> one_two_five(256)
    [1, 2, 5, 10, 20, 50, 100, 200]
    """
    edges: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > limit:
                return edges
            edges.append(mantissa * scale)
        scale *= 10


# The engine's counts, read when scraped: (series, help, field of `EngineStats`).
ENGINE_GAUGES = (
    ("num_requests_running", "Number of requests in model execution batches.", "running"),
    ("num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
)
ENGINE_TOTALS = (
    ("num_preemptions", "Cumulative number of preemption from the engine.", "preemptions"),
    ("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
     "prefix_cache_queries"),
    ("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
     "prefix_cache_hits"),
)  # fmt: skip
# Speculative decoding's counts, read when scraped: (field of `SpecDecodingStats`, help).
SPEC_DECODING_TOTALS = (
    ("num_drafts", "Number of spec decoding drafts."),
    ("num_draft_tokens", "Number of draft tokens."),
    ("num_accepted_tokens", "Number of accepted tokens."),
)
# What is counted per request: (attribute, series, help, buckets: "tokens" for the 1-2-5
# series up to the model's length).
REQUEST_HISTOGRAMS = (
    ("prompt_len", "request_prompt_tokens", "Number of prefill tokens processed.", "tokens"),
    ("output_len", "request_generation_tokens", "Number of generation tokens processed.",
     "tokens"),
    ("computed", "request_prefill_kv_computed_tokens",
     "Histogram of new KV tokens computed during prefill (excluding cached tokens).", "tokens"),
    ("max_generation", "request_max_num_generation_tokens",  # generated, despite the help
     "Histogram of maximum number of requested generation tokens.", "tokens"),
    ("n", "request_params_n", "Histogram of the n request parameter.", VLLM.request_params_n),
    ("max_tokens", "request_params_max_tokens",
     "Histogram of the max_tokens request parameter.", "tokens"),
    ("ttft", "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
     VLLM.time_to_first_token),
    ("itl", "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
     GAP_BUCKETS),
    ("tpot", "request_time_per_output_token_seconds",
     "Histogram of time_per_output_token_seconds per request.", GAP_BUCKETS),
    ("e2e", "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
     LATENCY_BUCKETS),
    ("queue", "request_queue_time_seconds",
     "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS),
    ("inference", "request_inference_time_seconds",
     "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS),
    ("prefill", "request_prefill_time_seconds",
     "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS),
    ("decode", "request_decode_time_seconds",
     "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS),
    ("preempted", "request_num_preemptions", "Number of preemptions per request.",
     VLLM.request_num_preemptions),
)  # fmt: skip


class ServerMetrics(Registry):
    """The series this server exposes, as vLLM names them, for one engine and model."""

    prompt_len: Histogram
    output_len: Histogram
    computed: Histogram
    max_generation: Histogram
    n: Histogram
    max_tokens: Histogram
    ttft: Histogram
    itl: Histogram
    tpot: Histogram
    e2e: Histogram
    queue: Histogram
    inference: Histogram
    prefill: Histogram
    decode: Histogram
    preempted: Histogram

    def __init__(self, engine: Engine, model_name: str) -> None:
        super().__init__(model_name=model_name, engine="0")
        self.engine = engine
        for name, help, field in ENGINE_GAUGES:
            self.add(Gauge(PREFIX + name, help, functools.partial(_stat, engine, field)))
        self.add(
            Info(PREFIX + "cache_config_info", "Information of the LLMEngine CacheConfig",
                 engine.cache_config),
            const=["engine"],  # a configuration, whatever model it serves (as in vLLM)
        )  # fmt: skip
        self.add(
            Gauge(PREFIX + "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                  self.kv_cache_usage)
        )  # fmt: skip
        for name, help, field in ENGINE_TOTALS:
            self.add(Total(PREFIX + name, help, functools.partial(_stat, engine, field)))
        if engine.speculative_config is not None:  # as vLLM: these only where it guesses
            self._add_spec_decoding(engine.speculative_config.num_speculative_tokens)
        self.add(
            TallyHistogram(PREFIX + "iteration_tokens_total",
                           "Histogram of number of tokens per engine_step.",
                           VLLM.iteration_tokens, lambda: engine.stats().step_tokens)
        )  # fmt: skip

        def counter(name: str, help: str) -> Counter:
            return self.add(Counter(PREFIX + name, help))

        self.prompt_tokens = counter("prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_tokens_cached = counter(
            "prompt_tokens_cached", "Number of cached prompt tokens."
        )
        self.generation_tokens = counter(
            "generation_tokens", "Number of generation tokens processed."
        )
        reasons = [{"finished_reason": r.value} for r in FinishReason]
        self.success = self.add(
            Counter(PREFIX + "request_success", "Count of successfully processed requests.",
                    ["finished_reason"], reasons)
        )  # fmt: skip
        counts = one_two_five(engine.max_model_len)
        for attribute, name, help, buckets in REQUEST_HISTOGRAMS:
            edges = counts if isinstance(buckets, str) else buckets
            setattr(self, attribute, self.add(Histogram(PREFIX + name, help, edges)))
        self.http = self.add(
            Counter("http_requests", "Total number of requests by method, status and handler.",
                    ["handler", "method", "status"]),
            const=[],  # the HTTP server's, not the engine's: vLLM's instrumentator's series
        )  # fmt: skip

    def _add_spec_decoding(self, num_speculative_tokens: int) -> None:
        """vLLM's speculative decoding counters: the acceptance rate is accepted / draft
        tokens, and the mean tokens a step emits per sequence 1 + accepted / drafts."""
        for name, help in SPEC_DECODING_TOTALS:
            read = functools.partial(_stat, self.engine, "spec_decoding", name)
            self.add(Total(PREFIX + "spec_decode_" + name, help, read))

        def per_position() -> list[int]:
            counts = self.engine.stats().spec_decoding.num_accepted_tokens_per_pos
            return [*counts, *[0] * (num_speculative_tokens - len(counts))]

        self.add(
            Totals(PREFIX + "spec_decode_num_accepted_tokens_per_pos",
                   "Accepted tokens per draft position.", "position", per_position)
        )  # fmt: skip

    def kv_cache_usage(self) -> float:
        """The share of KV blocks sequences hold (0 for an engine without blocks)."""
        stats = self.engine.stats()
        return stats.kv_blocks_used / stats.kv_blocks_total if stats.kv_blocks_total else 0.0

    def admitted(self, prompt_tokens: int, n: int, max_tokens: int) -> None:
        """A request of `n` sequences, each of `prompt_tokens` and up to `max_tokens`."""
        for _ in range(n):
            self.max_tokens.observe(max_tokens)
            self.prompt_tokens.inc(prompt_tokens)

    def request_finished(self, generated: list[int]) -> None:
        """All the sequences of one request ended, having generated `generated` tokens:
        vLLM counts its ``n`` and the most tokens one of them generated, once a request."""
        self.n.observe(len(generated))
        self.max_generation.observe(max(generated))

    def finished(
        self,
        reason: FinishReason,
        times: RequestTimes | None,
        prompt_tokens: int,
        output_tokens: int,
        cached_tokens: int,
    ) -> None:
        """One sequence ended (an aborted one may have no times: it never ran)."""
        self.success.inc(finished_reason=reason.value)
        self.prompt_len.observe(prompt_tokens)
        self.output_len.observe(output_tokens)
        self.prompt_tokens_cached.inc(cached_tokens)
        self.computed.observe(prompt_tokens - cached_tokens)
        if times is None:
            return
        self.preempted.observe(times.num_preemptions)
        self.e2e.observe(times.finished - times.arrival)
        self.queue.observe(times.scheduled - times.arrival)
        self.inference.observe(times.finished - times.scheduled)
        self.prefill.observe(times.first_token - times.scheduled)
        self.decode.observe(times.finished - times.first_token)
        if output_tokens > 1:
            self.tpot.observe((times.finished - times.first_token) / (output_tokens - 1))


def _stat(engine: Engine, *fields: str) -> float:
    """A field of the engine's `EngineStats` (``"spec_decoding", "num_drafts"``: a field of
    one of its fields), read when scraped."""
    value: Any = engine.stats()
    for field in fields:
        value = getattr(value, field)
    return value
