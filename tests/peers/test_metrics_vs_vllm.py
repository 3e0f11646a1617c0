"""Every series vLLM's live /metrics shows is on ours under our prefix, or named as not ours.

Both servers serve a few requests first, so that every series has samples. Then, for each
family vLLM exposes, read with Prometheus' own parser: ours has the family of the same
name after the prefix (``vllm:`` becomes ``llmserve:``; vLLM's HTTP metrics, which have no
prefix, keep their names), of the same type, whose samples carry the same label names,
and, for a histogram, every one of vLLM's bucket edges (ours may add finer ones below its
smallest). A family that does not apply to this server is listed in `NOT_OURS` with why;
`NOT_OURS` may name only families vLLM really shows, so it cannot go stale either.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

NOT_OURS = {
    # prometheus_client's own series, about the process rather than serving
    "process_cpu_seconds": "the Python process's counters, not the server's",
    "process_max_fds": "the Python process's counters, not the server's",
    "process_open_fds": "the Python process's counters, not the server's",
    "process_resident_memory_bytes": "the Python process's counters, not the server's",
    "process_start_time_seconds": "the Python process's counters, not the server's",
    "process_virtual_memory_bytes": "the Python process's counters, not the server's",
    "python_gc_collections": "the Python process's counters, not the server's",
    "python_gc_objects_collected": "the Python process's counters, not the server's",
    "python_gc_objects_uncollectable": "the Python process's counters, not the server's",
    "python_info": "the Python process's counters, not the server's",
    # the HTTP instrumentator's other series
    "http_request_duration_highr_seconds": "ours counts answers only; latency is per token",
    "http_request_duration_seconds": "ours counts answers only; latency is per token",
    "http_request_size_bytes": "ours counts answers only (bodies are bounded by a limit)",
    "http_response_size_bytes": "ours counts answers only",
    # vLLM features this server does not have
    "vllm:num_requests_waiting_by_reason": "nothing defers a request here but capacity",
    "vllm:engine_sleep_state": "no sleep mode (vLLM's --enable-sleep-mode)",
    "vllm:external_prefix_cache_queries": "no KV connector: no external prefix cache",
    "vllm:external_prefix_cache_hits": "no KV connector: no external prefix cache",
    "vllm:mm_cache_queries": "text only: no multimodal cache",
    "vllm:mm_cache_hits": "text only: no multimodal cache",
    "vllm:prompt_tokens_by_source": "one source only (local compute and cache): prompt_tokens",
    "vllm:prompt_tokens_cached_by_source": "one source only (the device): prompt_tokens_cached",
    "vllm:admission_rejections": "our queue bound answers 429 (http_requests_total{4xx})",
    "vllm:estimated_flops_per_gpu": "no per-step FLOP and byte estimates (vLLM's perf metrics)",
    "vllm:estimated_read_bytes_per_gpu": "no per-step FLOP and byte estimates",
    "vllm:estimated_write_bytes_per_gpu": "no per-step FLOP and byte estimates",
}


def families(server: servers.Server) -> dict:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def ours_named(name: str) -> str:
    return "llmserve:" + name.removeprefix("vllm:") if name.startswith("vllm:") else name


def labels(family) -> set[str]:
    return {k for s in family.samples for k in s.labels} - {"le"}


def edges(family) -> set[float]:
    return {float(s.labels["le"]) for s in family.samples if "le" in s.labels} - {float("inf")}


@pytest.fixture(scope="module")
def both(vllm, ours):
    for server in (vllm, ours):  # samples in every series: a few requests each
        for stream in (False, True):
            body = {"model": servers.MODEL_NAME, "prompt": "Once upon a time,", "max_tokens": 4,
                    "n": 2, "stream": stream}  # fmt: skip
            httpx.post(f"{server.base_url}/completions", json=body, timeout=60).raise_for_status()
    return families(vllm), families(ours)


def test_every_vllm_series_is_ours_or_named_as_not(both):
    theirs, mine = both
    shown = {name for name in theirs if not name.endswith("_created")}  # prometheus_client's
    assert set(NOT_OURS) <= shown, (
        f"NOT_OURS names what vLLM no longer shows: {set(NOT_OURS) - shown}"
    )
    differences = {}
    for name in sorted(shown - set(NOT_OURS)):
        family, ours = theirs[name], mine.get(ours_named(name))
        if ours is None:
            differences[name] = "missing"
        elif ours.type != family.type:
            differences[name] = f"type {ours.type}, vLLM's {family.type}"
        elif name.endswith("_info"):  # an info gauge: its labels are the config's fields
            if not labels(ours) <= labels(family):
                differences[name] = f"labels vLLM has not: {labels(ours) - labels(family)}"
        elif labels(ours) != labels(family):
            differences[name] = f"labels {sorted(labels(ours))}, vLLM's {sorted(labels(family))}"
        elif not edges(family) <= edges(ours):
            differences[name] = f"buckets missing: {sorted(edges(family) - edges(ours))}"
    assert differences == {}
    print(f"\n{len(shown) - len(NOT_OURS)} of vLLM's {len(shown)} series are ours; not ours:")
    for name, why in NOT_OURS.items():
        print(f"  {name}: {why}")


def test_ours_adds_only_finer_edges_below_vllms_smallest(both):
    theirs, mine = both
    for name, family in theirs.items():
        ours = mine.get(ours_named(name))
        if family.type == "histogram" and ours is not None and edges(family):
            extra = edges(ours) - edges(family)
            assert all(e < min(edges(family)) for e in extra), (name, sorted(extra))


# Series that count the same thing on both servers for the same requests (prompt caching,
# which the two engines do differently, and times, which differ, are left out).
COUNTED_ALIKE = [
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
    "request_prompt_tokens_count",
    "request_prompt_tokens_sum",
    "request_generation_tokens_sum",
    "request_params_n_count",
    "request_params_n_sum",
    "request_params_max_tokens_sum",
    "request_max_num_generation_tokens_sum",
    "time_to_first_token_seconds_count",
    "inter_token_latency_seconds_count",
    "e2e_request_latency_seconds_count",
    "request_queue_time_seconds_count",
]


def counted(server: servers.Server, prefix: str) -> dict[tuple, float]:
    """The COUNTED_ALIKE samples now, by name after the prefix and labels, less the model's."""
    values = {}
    for family in families(server).values():
        for s in family.samples:
            name = s.name.removeprefix(prefix)
            if name in COUNTED_ALIKE:
                rest = {k: v for k, v in s.labels.items() if k not in ("engine", "model_name")}
                values[name, tuple(sorted(rest.items()))] = s.value
    return values


def test_the_same_requests_move_the_same_counts_on_both(vllm, ours):
    moved = {}
    for server, prefix in ((vllm, "vllm:"), (ours, "llmserve:")):
        before = counted(server, prefix)
        for stream, n in ((False, 2), (True, 1), (False, 3)):
            body = {"model": servers.MODEL_NAME, "prompt": "The fox and the", "max_tokens": 6,
                    "n": n, "stream": stream, "ignore_eos": True}  # fmt: skip
            httpx.post(f"{server.base_url}/completions", json=body, timeout=60).raise_for_status()
        after = counted(server, prefix)
        moved[prefix] = {
            k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)
        }
    print("\nmoved by 3 requests of 6 sequences:", moved["vllm:"])
    assert moved["llmserve:"] == moved["vllm:"]
