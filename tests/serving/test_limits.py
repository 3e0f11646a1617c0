"""The server under hostile input: limits, timeouts, access, and nothing left running.

Each test here is a finding of a hostile review of `llmserve-ref serve`: before the fix,
the request froze the server, answered 500, was silently accepted, or left generation
running for nobody. Every refusal must be an OpenAI error body naming what was wrong,
and the server must go on serving everyone else.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from functools import partial

import httpx
import openai
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

import conftest
from conftest import JSON, error_of, post
from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.serving.launcher import serve_in_thread
from llmserve_ref.serving.limits import Limits

wait_until = partial(conftest.wait_until, timeout=20.0)
LIMITS = Limits(max_request_bytes=64 * 1024, max_stop_strings=4, max_stop_chars=32)


@pytest.fixture(scope="module")
def server():
    with serve_in_thread("tiny", limits=LIMITS) as running:
        yield running


def still_serving(server) -> None:
    ok = post(server, {"model": "tiny", "prompt": "Once", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def counts(server, handler: str) -> dict[str, float]:
    """The answers /metrics counted on `handler`, by status class ("2xx", "4xx", "5xx")."""
    text = httpx.get(f"{server.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return {
        s.labels["status"]: s.value
        for s in families["http_requests"].samples
        if s.name == "http_requests_total" and s.labels["handler"] == handler
    }


def raw_http(server, data: bytes) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(data)
    return sock


def read_reply(sock: socket.socket) -> str:
    """One HTTP response off `sock`: its head, then Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(
        next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[
            1
        ]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return (head + b"\r\n\r\n" + body).decode()


def test_a_body_announced_too_big_is_refused_unread(server):
    # Content-Length says 200 MB and nothing follows: the answer cannot wait for the body.
    sock = raw_http(
        server,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 200000000\r\n\r\n",
    )
    reply = read_reply(sock)
    sock.close()
    assert reply.startswith("HTTP/1.1 413")
    assert "request_too_large" in reply and "65536 bytes" in reply
    still_serving(server)


def test_a_body_that_grows_too_big_is_refused_while_read(server):
    def chunks():  # chunked transfer: no Content-Length to check first
        for _ in range(100):
            yield b" " * 4096

    response = httpx.post(
        f"{server.url}/v1/completions", content=chunks(), headers=JSON, timeout=30
    )
    assert error_of(response, 413)["code"] == "request_too_large"
    still_serving(server)


def test_a_prompt_too_long_is_refused_from_its_length_before_tokenizing(server):
    engine = server.engine
    chars = engine.max_model_len * engine.tokenizer.max_token_chars + 1
    for endpoint, body, param in [
        ("completions", {"prompt": "a" * chars}, "prompt"),
        ("chat/completions", {"messages": [{"role": "user", "content": "a" * chars}]}, "messages"),
    ]:
        error = error_of(post(server, {"model": "tiny", **body}, endpoint), 400)
        assert (error["code"], error["param"]) == ("context_length_exceeded", param)
        assert f"{chars} characters" in error["message"]
    still_serving(server)


def test_the_character_bound_never_refuses_a_prompt_that_fits():
    # The bound is exact: a text of n tokens has at most n * max_token_chars characters.
    engine_tokenizer = LoopEngine.load("tiny").tokenizer
    vocab = engine_tokenizer.backend.get_vocab(with_added_tokens=True)
    longest = max(vocab, key=len)
    text = engine_tokenizer.decode([vocab[longest]] * 3)
    assert len(engine_tokenizer.encode(text)) <= 3
    assert len(text) <= 3 * engine_tokenizer.max_token_chars


class BlockingTokenizer:
    """A tokenizer whose encode waits until released: the server must not wait with it."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.entered, self.release = tokenizer, threading.Event(), threading.Event()

    def encode(self, *args, **kwargs):
        self.entered.set()
        assert self.release.wait(30)
        return self.tokenizer.encode(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_tokenizing_does_not_block_the_event_loop():
    engine = LoopEngine.load("tiny")
    engine.tokenizer = BlockingTokenizer(engine.tokenizer)
    with serve_in_thread("tiny", engine=engine) as running:
        done: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: done.append(post(running, {"model": "tiny", "prompt": "Once"}))
        )
        thread.start()
        assert engine.tokenizer.entered.wait(10)
        # The prompt is being tokenized, and the server still answers.
        assert httpx.get(f"{running.url}/health", timeout=5).status_code == 200
        engine.tokenizer.release.set()
        thread.join()
        assert done[0].status_code == 200
    engine.close()


BAD = [
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "5 stop strings"),
    ({"stop": "x" * 33}, "stop", "33 characters"),
    ({"seed": 2**64}, "seed", "less than or equal to 9223372036854775807"),
    ({"seed": 10**30}, "seed", "less than or equal to"),
    ({"seed": -(2**63) - 1}, "seed", "greater than or equal to"),
    ({"temperature": float("nan")}, "temperature", "temperature must be in [0, 2]"),
    ({"temperature": float("inf")}, "temperature", "temperature must be in [0, 2]"),
    ({"temperature": 2.5}, "temperature", "temperature must be in [0, 2]"),
    ({"repetition_penalty": float("nan")}, "repetition_penalty", "repetition_penalty"),
    ({"top_p": float("nan")}, "top_p", "top_p"),
    ({"frequency_penalty": float("nan")}, "frequency_penalty", "frequency_penalty"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "not supported"),
    ({"tool_choice": "auto"}, "tool_choice", "not supported"),
    ({"functions": [{"name": "f"}]}, "functions", "not supported"),
    ({"response_format": {"type": "json_object"}}, "response_format", "{'type': 'text'}"),
    ({"best_of": 3}, "best_of", "best_of equal to n"),
    ({"suffix": " the end."}, "suffix", "not supported"),
]


@pytest.mark.parametrize(("fields", "param", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_values_get_a_400_naming_the_field(server, fields, param, message):
    # json.dumps writes NaN and Infinity, which Python's json (and pydantic) read back.
    response = post(server, {"model": "tiny", "prompt": "Once", "max_tokens": 2, **fields})
    error = error_of(response, 400)
    assert error["param"] == param and message in error["message"], error
    still_serving(server)


@pytest.mark.parametrize(
    "fields",
    [
        {"user": "u-1", "metadata": {"a": "b"}},
        {"response_format": {"type": "text"}},
        {"best_of": 1},
        {"tools": [], "tool_choice": "none"},
        {"seed": 2**63 - 1},
        {"seed": -(2**63)},
    ],
)
def test_harmless_fields_and_edge_values_are_accepted(server, fields):
    response = post(server, {"model": "tiny", "prompt": "Once", "max_tokens": 2, **fields})
    assert response.status_code == 200, response.text


def test_a_tiny_temperature_samples_as_vllm_does_instead_of_nan(server):
    # 1e-300 overflows the logits; vLLM 0.32 raises it to 0.01, which is all but greedy.
    body = {"model": "tiny", "prompt": "Once upon a time,", "max_tokens": 8, "seed": 0}
    tiny = post(server, {**body, "temperature": 1e-300}).json()["choices"][0]
    greedy = post(server, {**body, "temperature": 0}).json()["choices"][0]
    assert tiny["finish_reason"] == "length"
    assert tiny["text"] == greedy["text"]


@pytest.mark.parametrize(
    "headers",
    [{"content-type": "text/plain"}, {}, {"content-type": "application/x-www-form-urlencoded"}],
)
def test_a_body_not_sent_as_json_gets_415(server, headers):
    body = {"model": "tiny", "prompt": "Once", "max_tokens": 2}
    error = error_of(post(server, body, headers=headers), 415)
    assert error["code"] == "unsupported_media_type"
    assert post(
        server, body, headers={"content-type": "application/json; charset=utf-8"}
    ).is_success


def gated(engine: LoopEngine) -> threading.Event:
    """Hold every forward pass of `engine` until the returned event is set: requests stay
    in flight as long as a test needs (a tiny model would finish them in milliseconds)."""
    gate, forward = threading.Event(), engine.model.forward
    engine.model.forward = lambda *args, **kwargs: (gate.wait(30), forward(*args, **kwargs))[1]
    return gate


def test_a_full_queue_answers_429_with_retry_after():
    engine = LoopEngine.load("tiny")
    gate = gated(engine)
    with serve_in_thread("tiny", engine=engine, limits=Limits(max_pending_seqs=2)) as running:
        body = {"model": "tiny", "prompt": "Once", "max_tokens": 4}
        holding = threading.Thread(target=post, args=(running, {**body, "n": 2}))
        holding.start()
        wait_until(lambda: engine.stats().running + engine.stats().waiting == 2)  # both seats taken
        refused = post(running, body)
        assert refused.headers["retry-after"] == "1"
        error = error_of(refused, 429)
        assert (error["code"], error["type"]) == ("server_overloaded", "server_error")
        client = OpenAI(base_url=running.base_url, api_key="none", max_retries=0)
        with pytest.raises(openai.RateLimitError):
            client.completions.create(model="tiny", prompt="Once", max_tokens=1)
        too_many = error_of(post(running, {**body, "n": 3}), 400)  # could never fit
        assert (too_many["param"], too_many["code"]) == ("n", "invalid_value")
        gate.set()
        holding.join()
        assert post(running, body).status_code == 200  # the seats came back
    engine.close()


@pytest.mark.parametrize("http", ["h11", "httptools"])  # uvicorn's two HTTP/1.1 parsers
def test_slow_headers_are_cut_off_and_slow_bodies_get_408(http):
    engine = LoopEngine.load("tiny")
    gate = gated(engine)
    limits = Limits(header_timeout_s=0.3, body_timeout_s=0.3)
    with serve_in_thread("tiny", engine=engine, limits=limits, http=http) as running:
        slow = raw_http(running, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        assert slow.recv(1024) == b""  # closed by the server, headers never completed
        slow.close()

        body = json.dumps({"model": "tiny", "prompt": "Once", "max_tokens": 2}).encode()
        head = (
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        partial = raw_http(running, head + body[:10])
        reply = read_reply(partial)
        partial.close()
        assert reply.startswith("HTTP/1.1 408") and "request_timeout" in reply

        # A request whose answer takes longer than both timeouts is not cut off, and
        # the next request on the same connection is served too.
        whole = raw_http(running, head + body)
        time.sleep(3 * limits.header_timeout_s)  # the engine holds the request meanwhile
        gate.set()
        assert read_reply(whole).startswith("HTTP/1.1 200")
        whole.sendall(head + body)
        assert read_reply(whole).startswith("HTTP/1.1 200")
        whole.close()
    engine.close()


class FailingEngine(LoopEngine):
    """Submits `fail_after` requests, then raises: a bug inside the engine."""

    fail_after = 0

    def submit(self, request):
        if self.fail_after == 0:
            raise RuntimeError("a bug in the engine")
        self.fail_after -= 1
        return super().submit(request)


def test_a_500_is_counted_and_a_failed_choice_cancels_the_others():
    engine = FailingEngine.load("tiny")
    cancelled: list[str] = []
    cancel = engine.cancel
    engine.cancel = lambda request_id: (cancelled.append(request_id), cancel(request_id))
    with serve_in_thread("tiny", engine=engine) as running:
        before = counts(running, "/v1/completions").get("5xx", 0)
        engine.fail_after = 3  # the 4th of 16 choices fails
        body = {"model": "tiny", "prompt": "Once", "max_tokens": 200, "n": 16, "ignore_eos": True}
        error = error_of(post(running, body), 500)
        assert error["type"] == "server_error"
        assert counts(running, "/v1/completions")["5xx"] == before + 1
        assert len(cancelled) == 3  # the three choices already submitted
        wait_until(lambda: engine.stats().running == 0 and engine.stats().waiting == 0)
        engine.fail_after = 10**9
        still_serving(running)
    engine.close()


def test_a_client_that_leaves_a_non_streamed_request_cancels_it():
    engine = LoopEngine.load("tiny")
    gate = gated(engine)
    with serve_in_thread("tiny", engine=engine) as running:
        body = json.dumps({"model": "tiny", "prompt": "Once", "max_tokens": 8}).encode()
        sock = raw_http(
            running,
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body,
        )
        wait_until(lambda: engine.stats().running + engine.stats().waiting == 1)
        sock.close()  # gone before its first token
        wait_until(lambda: running.metrics.success.value(finished_reason="abort") == 1)
        gate.set()
        wait_until(lambda: engine.stats().running == 0 and engine.stats().waiting == 0)
        still_serving(running)
    engine.close()


def test_the_serve_command_takes_each_limit_and_the_key_as_flags(monkeypatch):
    from llmserve_ref.cli import build_parser, server_limits

    args = build_parser().parse_args(
        ["serve", "--max-request-bytes", "2MiB", "--max-stop-strings", "8", "--max-stop-chars",
         "64", "--max-pending-seqs", "100", "--header-timeout", "5", "--body-timeout", "7",
         "--api-key", "k", "--allowed-origins", '["https://app.example"]']
    )  # fmt: skip
    assert server_limits(args) == Limits(2 * 2**20, 8, 64, 100, 5.0, 7.0)
    assert (args.api_key, args.allowed_origins) == ("k", ["https://app.example"])
    assert server_limits(build_parser().parse_args(["serve"])) == Limits()
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--allowed-origins", "https://app.example"])
    monkeypatch.setenv("LLMSERVE_API_KEY", "from-env")
    assert build_parser().parse_args(["serve"]).api_key == "from-env"


def test_min_tokens_above_max_tokens_is_refused_as_vllm_does(server):
    body = {"model": "tiny", "prompt": "Once", "max_tokens": 2, "min_tokens": 3}
    error = error_of(post(server, body), 400)
    assert error["param"] == "min_tokens" and "max_tokens (2)" in error["message"]


def test_a_client_that_leaves_mid_body_is_counted_as_4xx_not_5xx(server):
    """Answered 499 (nginx's "client closed request"), which /metrics counts as 4xx."""
    body = json.dumps({"model": "tiny", "prompt": "Once"}).encode()
    before = counts(server, "/v1/completions")
    sock = raw_http(
        server,
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body[:10],
    )
    sock.close()  # found by the soak: this was an unhandled ClientDisconnect, a 500
    wait_until(lambda: counts(server, "/v1/completions").get("4xx", 0) == before.get("4xx", 0) + 1)
    assert counts(server, "/v1/completions").get("5xx", 0) == before.get("5xx", 0)
    still_serving(server)
