"""The /metrics text: Prometheus' own parser reads it, and it counts exactly what happened."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from conftest import JSON


def scrape(server) -> dict:
    """GET /metrics, read by Prometheus' own parser: each family, by name."""
    response = httpx.get(f"{server.url}/metrics")
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def sample_values(families: dict) -> dict:
    """Every sample's value, by its name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families.values()
        for s in family.samples
    }


def test_metrics_parse_as_prometheus_text_and_count_exactly_what_happened(server, client):
    before = sample_values(scrape(server))
    httpx.post(f"{server.url}/v1/completions", content=b"{", headers=JSON)
    reply = client.completions.create(model="tiny", prompt="Once", max_tokens=3)
    families = scrape(server)
    after = sample_values(families)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0)

    model = {"engine": "0", "model_name": "tiny"}  # on the engine's series, as vLLM labels them
    assert families["http_requests"].type == "counter"
    for status in ("2xx", "4xx"):  # grouped by class, as vLLM's instrumentator does
        labels = {"handler": "/v1/completions", "method": "POST", "status": status}
        assert delta("http_requests_total", **labels) == 1  # the HTTP server's: no model
    tokens = reply.usage.completion_tokens
    assert delta("llmserve:prompt_tokens_total", **model) == reply.usage.prompt_tokens
    assert delta("llmserve:generation_tokens_total", **model) == tokens
    assert delta("llmserve:request_success_total", finished_reason="length", **model) == 1
    for reason in ("stop", "length", "abort"):  # each shown from the start, as in vLLM
        labels = tuple(sorted({"finished_reason": reason, **model}.items()))
        assert ("llmserve:request_success_total", labels) in after
    for name, observed in (
        ("llmserve:time_to_first_token_seconds", 1),  # one request: one first token
        ("llmserve:inter_token_latency_seconds", tokens - 1),  # the gaps between its tokens
        ("llmserve:e2e_request_latency_seconds", 1),
        ("llmserve:request_queue_time_seconds", 1),
        ("llmserve:request_generation_tokens", 1),
    ):
        assert families[name].type == "histogram"
        assert delta(f"{name}_count", **model) == observed
    assert delta("llmserve:request_generation_tokens_sum", **model) == tokens
    for name in (
        "llmserve:num_requests_running",
        "llmserve:num_requests_waiting",
        "llmserve:kv_cache_usage_perc",
        "llmserve:cache_config_info",
    ):
        assert families[name].type == "gauge"


def test_counters_and_buckets_are_written_as_prometheus_client_writes_them(server):
    """Names and edges a query written against vLLM finds: ``_total`` on a counter's
    HELP and TYPE lines, and ``le="1.0"``, not ``le="1"``."""
    text = httpx.get(f"{server.url}/metrics").text
    assert "# TYPE llmserve:generation_tokens_total counter" in text.splitlines()
    buckets = [line for line in text.splitlines()
               if line.startswith("llmserve:request_prompt_tokens_bucket")]  # fmt: skip
    assert buckets and all('le="' in b for b in buckets)
    assert 'le="1.0"' in buckets[0] and not any('le="1"' in b for b in buckets)
