"""The result file in vLLM's format: flat keys, milliseconds, standard JSON, read back by the
same function that reads `vllm bench serve`'s."""

from __future__ import annotations

import json
import math

import pytest

from llmserve_ref.bench.bench_client import BenchConfig, BenchResult
from llmserve_ref.bench.bench_metrics import RequestRecord
from llmserve_ref.bench.bench_result import (
    COUNTS,
    SavedResult,
    read_result,
    result_filename,
    to_result,
    write_result,
)
from llmserve_ref.planning.slo import SLO

# The keys of vLLM 0.32's result file without --save-detailed (vllm/benchmarks/serve.py:
# main_async's setup keys, benchmark()'s result dict, and process_one_metric's for its
# default metrics and percentile) that this client writes too: all but its peak-throughput
# and audio figures and its per-request latencies and queue times, which it writes only
# with --save-detailed (tests/peers/test_bench_vs_vllm.py compares the keys of real files).
VLLM_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl")
      for stat in ("mean", "median", "std", "p99")),
}  # fmt: skip


def two_requests() -> BenchResult:
    """One request of 3 tokens 20 ms apart after a TTFT of 50 ms, and one that failed."""
    config = BenchConfig("http://x", model="tiny", max_concurrency=2, num_prompts=2)
    ok = RequestRecord(0, 0.0, 0.0, [0.05, 0.07, 0.09], output_tokens=3, prompt_tokens=32)
    failed = RequestRecord(1, 0.0, 0.01, prompt_tokens=32, error="HTTP 500: boom")
    return BenchResult(config, [ok, failed], duration=0.5)


def test_the_result_has_vllms_keys_in_milliseconds():
    result = two_requests()
    document = to_result(result, result.summary(SLO(ttft=0.1)))
    assert set(document) >= VLLM_KEYS
    assert (document["completed"], document["failed"], document["total_output_tokens"]) == (1, 1, 3)
    assert (document["request_rate"], document["max_concurrency"]) == ("inf", 2)
    assert document["median_ttft_ms"] == pytest.approx(50.0)
    assert document["mean_tpot_ms"] == pytest.approx(20.0)
    assert document["std_itl_ms"] == pytest.approx(0.0)
    assert document["request_goodput"] == pytest.approx(2.0)  # 1 good request in 0.5 s
    assert document["goodput"] == {"ttft": 100.0}
    assert document["error_counts"] == {"HTTP 500: boom": 1}
    assert document["config"]["request_rate"] == "inf" and "api_key" not in document["config"]


def test_detailed_adds_vllms_per_request_lists_in_seconds():
    result = two_requests()
    document = to_result(result, result.summary(), detailed=True)
    assert document["output_lens"] == [3, 0] and document["errors"] == ["", "HTTP 500: boom"]
    assert document["ttfts"] == pytest.approx([0.05, 0.0])
    assert document["itls"][0] == pytest.approx([0.02, 0.02]) and document["itls"][1] == []
    assert document["latencies"] == pytest.approx([0.09, 0.0])
    assert document["queue_times"] == pytest.approx([0.0, 0.01])
    assert document["input_lens"] == [32, 32] and len(document["requests"]) == 2


def test_written_json_is_standard_and_reads_back(tmp_path):
    result = two_requests()
    result.records.pop(0)  # nothing succeeded: every latency is undefined
    document = to_result(result, result.summary(), metrics=("ttft", "e2el"))
    write_result(document, tmp_path / "deep" / "run.json")
    text = (tmp_path / "deep" / "run.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["median_e2el_ms"] is None
    saved = read_result(tmp_path / "deep" / "run.json")
    assert (saved.completed, saved.failed) == (0, 1)
    assert saved.latencies_ms["p99_ttft_ms"] is None and "mean_tpot_ms" not in saved.latencies_ms


def test_the_file_name_is_vllms():
    document = {
        "label": None,
        "backend": "openai-chat",
        "request_rate": 2.5,
        "max_concurrency": None,
        "model_id": "org/model",
        "date": "20250102-030405",
    }
    # vLLM names the model by the last part of its id
    assert result_filename(document) == "openai-chat-2.5qps-model-20250102-030405.json"
    document |= {"label": "run", "max_concurrency": 8}
    assert result_filename(document) == "run-2.5qps-concurrency8-model-20250102-030405.json"


def test_something_else_is_not_read_as_a_result():
    with pytest.raises(ValueError, match="not a benchmark result: no completed, failed"):
        SavedResult.of({"duration": 1.0})
    document = dict.fromkeys(COUNTS, 0)
    with pytest.raises(ValueError, match="not saved with --save-detailed"):
        SavedResult.of(document).successful_output_lens()
    assert math.isclose(SavedResult.of(document | {"duration": 2.5}).duration, 2.5)
