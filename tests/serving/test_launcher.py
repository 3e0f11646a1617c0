"""The launcher: ``llmserve-ref serve`` and its in-process twin, started and stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import pytest

from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.serving.app import Access
from llmserve_ref.serving.launcher import (
    ANNOUNCED,
    exposure_warning,
    kv_cache_report,
    load_engine,
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "grace", "reasons"),
    [(signal.SIGTERM, 0.0, {"abort"}), (signal.SIGINT, 30.0, {"length", "stop"})],
    ids=["SIGTERM-no-grace-aborts", "SIGINT-with-grace-finishes"],
)
def test_a_signal_shuts_down_gracefully_and_exits_zero(sig, grace, reasons):
    """In flight when the signal comes, a stream ends with a last chunk and [DONE]: cut short
    ("abort") when there is no grace period, finished normally within one."""
    env = {**os.environ, "LLMSERVE_DEVICE": os.environ.get("LLMSERVE_DEVICE", "cpu")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmserve_ref.cli",
            "serve",
            "--port",
            "0",
            "--shutdown-grace",
            str(grace),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        kv_report = process.stdout.readline()  # as vLLM does, the KV cache's size first
        assert kv_report.startswith("llmserve-ref: KV cache: 2048 blocks of 16 tokens"), kv_report
        announce = process.stdout.readline()
        assert announce.startswith("llmserve-ref: serving tiny at http://127.0.0.1:"), announce
        base_url = announce.split(" at ")[1].strip()
        assert ANNOUNCED.search(announce)[1] + "/v1" == base_url  # what scripts read it by
        body = {"model": "tiny", "prompt": "Once", "max_tokens": 120, "stream": True, "seed": 0}
        body["ignore_eos"] = True  # so only the signal or the length can end it
        with httpx.stream("POST", f"{base_url}/completions", json=body, timeout=60) as response:
            lines = (line for line in response.iter_lines() if line)
            next(lines)
            process.send_signal(sig)
            rest = list(lines)
        assert rest[-1] == "data: [DONE]"
        last = json.loads(rest[-2].removeprefix("data: "))
        assert last["choices"][0]["finish_reason"] in reasons
        assert process.wait(timeout=30) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(base_url.removesuffix("/v1") + "/health")
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.mark.slow
def test_serve_compile_compiles_at_startup_and_answers_as_the_eager_server(server):
    """``--compile``: a startup line with the sizes and the seconds, then the same greedy
    text as the eager engine's (the in-process `server`)."""
    env = {**os.environ, "LLMSERVE_DEVICE": os.environ.get("LLMSERVE_DEVICE", "cpu")}
    command = [sys.executable, "-m", "llmserve_ref.cli", "serve", "--port", "0",
               "--max-num-seqs", "4", "--compile", "--log-level", "warning"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout.readline().startswith("llmserve-ref: KV cache: ")
        compiled = process.stdout.readline()
        assert compiled.startswith(
            "llmserve-ref: compiled the forward for decode batch sizes [1, 2, 4] and for any "
            "other step in "
        ), compiled
        base_url = process.stdout.readline().split(" at ")[1].strip()
        body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
        texts = [
            httpx.post(f"{url}/completions", json=body, timeout=60).json()["choices"][0]["text"]
            for url in (base_url, server.base_url)
        ]
        assert texts[0] == texts[1] and len(texts[0]) > 24
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


def test_the_kv_cache_report_says_what_vllm_logs(server):
    engine = server.engine
    report = kv_cache_report(engine)
    tokens = engine.num_blocks * engine.config.block_size
    assert report.startswith(
        f"KV cache: {engine.num_blocks} blocks of 16 tokens ({tokens:,} tokens"
    )
    assert f"{tokens / engine.max_model_len:.1f}x" in report and "MiB" in report


def test_load_engine_names_the_two_engines_and_refuses_others():
    with pytest.raises(ValueError, match="'batched' or 'loop'"):
        load_engine("tiny", "vllm")
    engine = load_engine("tiny", "loop")
    try:
        assert isinstance(engine, LoopEngine) and engine.max_model_len == 256
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("host", "key", "warned"),
    [("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False),
     ("0.0.0.0", "k", False), ("0.0.0.0", None, True), ("192.168.1.2", None, True)],
)  # fmt: skip
def test_listening_beyond_this_machine_without_a_key_is_warned_about(host, key, warned):
    assert (exposure_warning(host, Access(api_key=key)) is not None) == warned


def test_serve_in_thread_gives_the_urls_the_engine_and_its_metrics(server):
    assert server.base_url == f"{server.url}/v1"
    assert server.metrics.render().startswith("# HELP")
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
