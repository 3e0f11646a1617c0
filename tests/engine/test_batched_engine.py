"""The batched engine behind the server: what the loop engine does not have.

Its core runs in a process of its own; `n > 1` shares one prefill; `cache_salt` keeps
tenants' prefixes apart; `ignore_eos` generates every token asked for; a stop string frees
the request's blocks at once; the counts reach `/metrics`; and a core that dies ends its
requests with "abort" instead of leaving them hanging.
"""

from __future__ import annotations

import os

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from conftest import wait_until
from llmserve_ref.device import get_device
from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.serving.launcher import serve_in_thread


@pytest.fixture(scope="module")
def server():
    with serve_in_thread("tiny", engine=BatchedEngine.load("tiny", get_device())) as running:
        yield running
    running.engine.close()


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.base_url, api_key="none", max_retries=0)


def test_the_core_runs_in_a_process_of_its_own(server):
    core = server.engine._core.worker
    assert core.pid != os.getpid() and core.is_alive()


def test_n_samples_share_one_prefill(server, client):
    engine = server.engine
    before = engine.stats().scheduled_tokens
    reply = client.completions.create(
        model="tiny",
        prompt="Once upon a time, there was a fox named Leo.",
        max_tokens=8,
        n=4,
        temperature=1.0,
        seed=3,
        extra_body={"ignore_eos": True},
    )
    prompt_tokens = reply.usage.prompt_tokens
    assert reply.usage.completion_tokens == 4 * 8 and len({c.text for c in reply.choices}) > 1
    # The prompt is computed once; each of the 4 samples then feeds back 7 of its 8 tokens.
    wait_until(lambda: engine.stats().running == 0)
    assert engine.stats().scheduled_tokens - before == prompt_tokens + 4 * 7


def test_ignore_eos_generates_every_token_asked_for(client):
    ended = client.completions.create(
        model="tiny", prompt="The end.", max_tokens=200, temperature=0
    )
    assert ended.choices[0].finish_reason == "stop"  # the model stops by itself here ...
    full = client.completions.create(
        model="tiny",
        prompt="The end.",
        max_tokens=200,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert full.usage.completion_tokens == 200 and full.choices[0].finish_reason == "length"


def test_a_cache_salt_shares_prefixes_only_within_a_tenant(server, client):
    engine = server.engine
    story = "Mia had a red ball. She played with it every day in the garden. " * 3

    def hits(salt: str) -> int:
        before = engine.stats().prefix_cache_hits
        client.completions.create(
            model="tiny", prompt=story, max_tokens=1, extra_body={"cache_salt": salt}
        )
        return engine.stats().prefix_cache_hits - before

    assert hits("tenant-a") == 0  # cold
    assert hits("tenant-a") > 0  # the same tenant finds its prompt
    assert hits("tenant-b") == 0  # another tenant does not


def test_a_stop_string_frees_the_requests_blocks_at_once(server, client):
    engine = server.engine
    free_text = (
        client.completions.create(
            model="tiny", prompt="Once upon a time,", max_tokens=30, temperature=0
        )
        .choices[0]
        .text
    )
    stop = free_text[8:14]
    reply = client.completions.create(
        model="tiny",
        prompt="Once upon a time,",
        max_tokens=200,
        temperature=0,
        stop=[stop],
        extra_body={"ignore_eos": True},
    )
    assert reply.choices[0].finish_reason == "stop" and reply.choices[0].text == free_text[:8]
    wait_until(lambda: engine.stats().kv_blocks_used == 0)


def test_the_engines_counts_reach_metrics(server, client):
    client.completions.create(model="tiny", prompt="Once", max_tokens=2)
    families = {
        f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)
    }
    values = {s.name: s.value for f in families.values() for s in f.samples if "le" not in s.labels}
    (info,) = families["llmserve:cache_config_info"].samples
    assert int(info.labels["num_gpu_blocks"]) == server.engine.num_blocks == 2048
    assert int(info.labels["block_size"]) == 16 and info.labels["enable_prefix_caching"] == "True"
    steps = server.engine.stats()
    assert values["llmserve:iteration_tokens_total_count"] == steps.steps >= 2
    assert values["llmserve:iteration_tokens_total_sum"] == steps.scheduled_tokens > 0
    for name in (
        "llmserve:prefix_cache_queries_total",
        "llmserve:prefix_cache_hits_total",
        "llmserve:num_preemptions_total",
        "llmserve:kv_cache_usage_perc",
    ):
        assert name in values


def test_a_core_that_dies_ends_its_requests_and_refuses_new_ones():
    engine = BatchedEngine.load("tiny", get_device())
    with serve_in_thread("tiny", engine=engine) as running:
        body = {
            "model": "tiny",
            "prompt": "Once",
            "max_tokens": 200,
            "stream": True,
            "extra": 1,
            "ignore_eos": True,
        }
        with httpx.stream("POST", f"{running.base_url}/completions", json=body) as response:
            lines = (line for line in response.iter_lines() if line)
            next(lines)
            engine._core.worker.kill()  # as the OOM killer would
            rest = list(lines)
        assert rest[-1] == "data: [DONE]" and '"finish_reason":"abort"' in rest[-2]
        wait_until(lambda: not engine._accepting)
        refused = httpx.post(
            f"{running.base_url}/completions",
            json={"model": "tiny", "prompt": "Once", "max_tokens": 2},
        )
        assert refused.status_code == 503
    engine.close()
