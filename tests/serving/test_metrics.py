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

    assert families["llmserve_requests"].type == "counter"
    for status in ("200", "400"):
        assert delta("llmserve_requests_total", endpoint="/v1/completions", status=status) == 1
    tokens = reply.usage.completion_tokens
    assert delta("llmserve_prompt_tokens_total") == reply.usage.prompt_tokens
    assert delta("llmserve_generation_tokens_total") == tokens
    for name, observed in (
        ("llmserve_time_to_first_token_seconds", 1),  # one request: one first token
        ("llmserve_inter_token_latency_seconds", tokens - 1),  # the gaps between its tokens
    ):
        assert families[name].type == "histogram"
        assert delta(f"{name}_count") == observed
    for name in (
        "llmserve_requests_running",
        "llmserve_requests_waiting",
        "llmserve_kv_cache_bytes",
    ):
        assert families[name].type == "gauge"
