"""The hand-written text format, read back by Prometheus' own parser (`prometheus_client`)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmserve_ref.serving.prometheus import Counter, Gauge, Histogram, Info, Registry, Total


def parsed(registry: Registry) -> dict:
    return {f.name: f for f in text_string_to_metric_families(registry.render())}


def test_each_kind_reads_back_with_its_type_labels_and_values():
    registry = Registry(model_name="tiny", engine="0")
    requests = registry.add(Counter("requests", "Requests.", ["code"]))
    requests.inc(code="200")
    requests.inc(2, code="200")
    requests.inc(code="429")
    registry.add(Gauge("running", "Running now.", lambda: 3))
    registry.add(Total("steps", "Steps run.", lambda: 41))
    latency = registry.add(Histogram("latency_seconds", "Latency.", [0.1, 1.0]))
    for seconds in (0.05, 0.5, 0.5, 7.0):
        latency.observe(seconds)
    registry.add(Info("config_info", "A configuration.", {"block_size": 16, "on": True}),
                 const=["engine"])  # fmt: skip
    families = parsed(registry)
    model = {"engine": "0", "model_name": "tiny"}
    assert [(f.name, f.type) for f in families.values()] == [
        ("requests", "counter"), ("running", "gauge"), ("steps", "counter"),
        ("latency_seconds", "histogram"), ("config_info", "gauge"),
    ]  # fmt: skip
    assert {(s.labels["code"], s.value) for s in families["requests"].samples} == {
        ("200", 3), ("429", 1)
    }  # fmt: skip
    assert families["running"].samples[0].labels == model
    assert families["steps"].samples[0].value == 41
    buckets = {s.labels["le"]: s.value for s in families["latency_seconds"].samples
               if s.name.endswith("_bucket")}  # fmt: skip
    assert buckets == {"0.1": 1, "1.0": 3, "+Inf": 4}  # cumulative
    total = {s.name: s.value for s in families["latency_seconds"].samples if "le" not in s.labels}
    assert total == {"latency_seconds_sum": pytest.approx(8.05), "latency_seconds_count": 4}
    (info,) = families["config_info"].samples
    assert info.labels == {"engine": "0", "block_size": "16", "on": "True"} and info.value == 1


def test_counters_carry_total_on_every_line_as_prometheus_client_writes_them():
    registry = Registry()
    registry.add(Counter("tokens", "Tokens."))
    assert registry.render().splitlines() == [
        "# HELP tokens_total Tokens.", "# TYPE tokens_total counter", "tokens_total 0"
    ]  # fmt: skip


def test_a_labelled_counter_shows_only_what_counted_or_was_preset():
    registry = Registry()
    finished = registry.add(Counter("finished", "Finished.", ["reason"], [{"reason": "stop"}]))
    assert 'finished_total{reason="stop"} 0' in registry.render()
    finished.inc(reason="length")
    assert finished.value(reason="length") == 1 and finished.value(reason="abort") == 0
    with pytest.raises(ValueError, match=r"finished_total counts by \('reason',\), not \('why',\)"):
        finished.inc(why="stop")


def test_label_values_are_escaped():
    registry = Registry(model_name='a "quoted"\\path\nname')
    registry.add(Gauge("up", "Up.", lambda: 1))
    (family,) = parsed(registry).values()
    assert family.samples[0].labels["model_name"] == 'a "quoted"\\path\nname'
