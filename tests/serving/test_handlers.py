"""The OpenAI-compatible server, driven by the official `openai` client and by raw HTTP."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
import torch
from openai import AsyncOpenAI, OpenAI

from conftest import wait_until
from llmserve_ref.device import get_device
from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.model.chat_template import render
from llmserve_ref.model.detokenizer import token_bytes
from llmserve_ref.model.weights import load_target
from llmserve_ref.serving.launcher import serve_in_thread

STORY = [{"role": "user", "content": "Tell me a story about Zoé."}]
JSON = {"content-type": "application/json"}


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["tiny"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_chat_stream_as_the_official_client_reads_it(client):
    stream = client.chat.completions.create(
        model="tiny",
        messages=STORY,
        stream=True,
        max_tokens=20,
        seed=1,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Once upon a time")
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 20
    assert last.usage.prompt_tokens == len(load_target("cpu")[1].encode(render(STORY)))
    assert all(c.usage is None for c in chunks[:-1])
    whole = client.chat.completions.create(model="tiny", messages=STORY, max_tokens=20, seed=1)
    assert whole.choices[0].message.content == text
    assert whole.usage == last.usage


def test_completions_stream_and_not(client):
    kwargs = {"model": "tiny", "prompt": "Once upon a time,", "max_tokens": 12, "seed": 5}
    chunks = list(client.completions.create(stream=True, **kwargs))
    assert {c.object for c in chunks} == {"text_completion"}
    streamed = "".join(c.choices[0].text for c in chunks)
    whole = client.completions.create(**kwargs)
    assert whole.choices[0].text == streamed
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 12


def test_completion_prompt_as_token_ids(client):
    ids = load_target("cpu")[1].encode("Once upon a time,", add_bos=True)
    by_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=8, temperature=0)
    by_text = client.completions.create(
        model="tiny", prompt="Once upon a time,", max_tokens=8, temperature=0
    )
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)


def sse_lines(server, body: dict) -> tuple[httpx.Headers, list[str]]:
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body) as response:
        return response.headers, [line for line in response.iter_lines() if line]


def test_the_wire_format_is_server_sent_events(server):
    headers, lines = sse_lines(
        server, {"model": "tiny", "prompt": "Once", "max_tokens": 4, "stream": True}
    )
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["x-accel-buffering"] == "no"
    assert headers["cache-control"] == "no-cache"
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2].removeprefix("data: "))
    timings = last["timings"]
    assert timings["prompt_n"] == 2 and timings["predicted_n"] == 4
    assert timings["predicted_per_second"] == pytest.approx(
        1e3 * timings["predicted_n"] / timings["predicted_ms"]
    )
    assert "timings" not in json.loads(lines[0].removeprefix("data: "))


def test_timings_ride_on_the_usage_chunk_when_usage_is_asked_for(server):
    _, lines = sse_lines(
        server,
        {
            "model": "tiny",
            "prompt": "Once",
            "max_tokens": 4,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    usage_chunk = json.loads(lines[-2].removeprefix("data: "))
    assert usage_chunk["choices"] == [] and usage_chunk["timings"]["predicted_n"] == 4


def test_same_seed_same_text_different_seed_different_text(client):
    def text(seed: int) -> str:
        r = client.completions.create(model="tiny", prompt="Once", max_tokens=30, seed=seed)
        return r.choices[0].text

    assert text(3) == text(3)
    assert len({text(s) for s in range(4)}) > 1


def test_eight_concurrent_streams_get_what_each_gets_alone(server):
    client = AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)

    async def stream(seed: int) -> str:
        chunks = await client.chat.completions.create(
            model="tiny", messages=STORY, stream=True, max_tokens=30, seed=seed, temperature=1.0
        )
        return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    async def main():
        alone = [await stream(seed) for seed in range(8)]
        together = await asyncio.gather(*(stream(seed) for seed in range(8)))
        await client.close()
        return alone, together

    alone, together = asyncio.run(main())
    assert together == alone
    assert len(set(alone)) > 1


def test_stop_strings_end_the_text_before_them(client):
    kwargs = {"model": "tiny", "prompt": "Once upon a time,", "temperature": 0, "max_tokens": 30}
    free = client.completions.create(**kwargs).choices[0].text
    stop = free[10:19]  # nine characters from the middle: several tokens
    for stream in (False, True):
        response = client.completions.create(stop=[stop, "zzz"], stream=stream, **kwargs)
        if stream:
            chunks = list(response)
            text = "".join(c.choices[0].text for c in chunks)
            reason = chunks[-1].choices[0].finish_reason
        else:
            text, reason = response.choices[0].text, response.choices[0].finish_reason
        assert (text, reason) == (free[: free.index(stop)], "stop")


def test_n_choices_are_each_seeded_with_seed_plus_index(client):
    kwargs = {"model": "tiny", "prompt": "Once", "max_tokens": 15}
    many = client.completions.create(n=3, seed=10, **kwargs)
    assert [c.index for c in many.choices] == [0, 1, 2]
    alone = [client.completions.create(seed=10 + i, **kwargs) for i in range(3)]
    singles = [r.choices[0].text for r in alone]
    assert [c.text for c in many.choices] == singles
    assert many.usage.completion_tokens == sum(r.usage.completion_tokens for r in alone)
    chunks = list(client.completions.create(n=3, seed=10, stream=True, **kwargs))
    streamed = [
        "".join(c.choices[0].text for c in chunks if c.choices[0].index == i) for i in range(3)
    ]
    assert streamed == singles
    chat = client.chat.completions.create(model="tiny", messages=STORY, n=2, max_tokens=5)
    assert [c.index for c in chat.choices] == [0, 1]


def test_max_completion_tokens_wins_over_max_tokens(client):
    r = client.chat.completions.create(
        model="tiny", messages=STORY, max_tokens=3, max_completion_tokens=6, temperature=0.5
    )
    assert r.usage.completion_tokens == 6


BAD_INPUTS = [
    ("completions", b"{not json", "invalid_json", None),
    ("completions", b"[1, 2]", "invalid_type", None),
    ("completions", {"prompt": "a"}, "missing_parameter", "model"),
    ("chat/completions", {"model": "tiny"}, "missing_parameter", "messages"),
    ("chat/completions", {"model": "tiny", "messages": []}, "invalid_value", "messages"),
    (
        "chat/completions",
        {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]},
        "invalid_value",
        "messages[0].role",
    ),
    (
        "chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": 5}]},
        "invalid_type",
        "messages[0].content",
    ),
    ("completions", {"model": "gpt-4o", "prompt": "a"}, "model_not_found", "model"),
    ("completions", {"model": "tiny", "prompt": 123}, "invalid_type", "prompt"),
    ("completions", {"model": "tiny", "prompt": []}, "invalid_value", "prompt"),
    ("completions", {"model": "tiny", "prompt": [5, 99999]}, "invalid_value", "prompt"),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "temperature": -1},
        "invalid_value",
        "temperature",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "temperature": "hot"},
        "invalid_type",
        "temperature",
    ),
    ("completions", {"model": "tiny", "prompt": "a", "top_p": 0}, "invalid_value", "top_p"),
    ("completions", {"model": "tiny", "prompt": "a", "top_p": 1.5}, "invalid_value", "top_p"),
    ("completions", {"model": "tiny", "prompt": "a", "top_k": 0}, "invalid_value", "top_k"),
    ("completions", {"model": "tiny", "prompt": "a", "min_p": 2}, "invalid_value", "min_p"),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "frequency_penalty": 3},
        "invalid_value",
        "frequency_penalty",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "presence_penalty": -2.5},
        "invalid_value",
        "presence_penalty",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "repetition_penalty": 0},
        "invalid_value",
        "repetition_penalty",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "max_tokens": -1},
        "invalid_value",
        "max_tokens",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "max_tokens": 10**9},
        "context_length_exceeded",
        "max_tokens",
    ),
    (
        "chat/completions",
        {"model": "tiny", "messages": STORY, "max_completion_tokens": 10**6},
        "context_length_exceeded",
        "max_completion_tokens",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "the cat " * 200},
        "context_length_exceeded",
        "prompt",
    ),
    (
        "chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "a b" * 300}]},
        "context_length_exceeded",
        "messages",
    ),
    ("completions", {"model": "tiny", "prompt": "a", "n": 0}, "invalid_value", "n"),
    ("completions", {"model": "tiny", "prompt": "a", "n": 100}, "invalid_value", "n"),
    ("completions", {"model": "tiny", "prompt": "a", "stream": "yes"}, "invalid_type", "stream"),
    ("completions", {"model": "tiny", "prompt": "a", "seed": 1.5}, "invalid_type", "seed"),
    ("completions", {"model": "tiny", "prompt": "a", "stop": 5}, "invalid_type", "stop"),
    (
        "completions",
        {"model": "tiny", "prompt": "a", "stream_options": {"include_usage": 1}},
        "invalid_type",
        "stream_options.include_usage",
    ),
]


@pytest.mark.parametrize(
    ("endpoint", "body", "code", "param"), BAD_INPUTS, ids=[f"{b[2]}-{b[3]}" for b in BAD_INPUTS]
)
def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(
    server, client, endpoint, body, code, param
):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(
        f"{server.url}/v1/{endpoint}", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == (404 if code == "model_not_found" else 400)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert param is None or param.split("[")[0].split(".")[0] in error["message"]
    ok = client.completions.create(model="tiny", prompt="Once", max_tokens=2)
    assert ok.usage.completion_tokens == 2


def test_the_official_client_raises_on_errors(client):
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model="tiny", prompt="a", temperature=-1)
    with pytest.raises(openai.NotFoundError, match="model"):
        client.completions.create(model="gpt-4o", prompt="a")


def test_a_client_that_disconnects_mid_stream_cancels_its_generation(server):
    engine, metrics = server.engine, server.metrics
    cancelled = metrics.success.value(finished_reason="abort")
    body = {"model": "tiny", "prompt": "Once", "max_tokens": 200, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body) as response:
        lines = response.iter_lines()
        for _ in range(3):
            next(lines)
        assert engine.stats().running == 1 and engine.stats().kv_cache_bytes > 0
    wait_until(lambda: engine.stats().running == 0)
    assert engine.stats().kv_cache_bytes == 0
    wait_until(lambda: metrics.success.value(finished_reason="abort") == cancelled + 1)
    steps = engine.stats().steps
    time.sleep(0.3)
    assert engine.stats().steps == steps


class ScriptedModel(torch.nn.Module):
    """Whatever the prompt, "generates" `script`: the engine then streams exactly these tokens."""

    def __init__(self, model, script: list[int]) -> None:
        super().__init__()
        self.inner, self.config, self.script = model, model.config, script
        self.prompt_len: dict[int, int] = {}

    @property
    def device(self):
        return self.inner.device

    def make_cache(self, batch_size: int, max_len: int):
        return self.inner.make_cache(batch_size, max_len)

    def forward(self, input_ids, cache):
        start, count = cache.length, input_ids.shape[1]
        cache.advance(count)
        prompt_len = self.prompt_len.setdefault(id(cache), count)
        logits = torch.full((1, count, self.config.vocab_size), -1e9, device=input_ids.device)
        logits[0, -1, self.script[start + count - prompt_len]] = 0.0
        return logits


def test_characters_split_across_tokens_reach_the_client_whole():
    model, tokenizer = load_target(get_device())
    text = "Zoé said “你好” 🙂"
    byte_token = {p[0]: i for i, p in enumerate(token_bytes(tokenizer)) if len(p) == 1}
    script = [byte_token[b] for b in text.encode()] + [tokenizer.eos_id]
    assert "\ufffd" in "".join(tokenizer.decode([i]) for i in script)  # split, as a test must
    engine = LoopEngine(ScriptedModel(model, script), tokenizer)
    with serve_in_thread("tiny", engine=engine) as server:
        client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        chunks = list(client.chat.completions.create(model="tiny", messages=STORY, stream=True))
    engine.close()
    deltas = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == text
    assert len(deltas) < len(script) - 1  # some tokens completed no character
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_usage_reports_the_prompt_tokens_found_in_the_prefix_cache(client):
    """OpenAI's (and vLLM's, with --enable-prompt-tokens-details) `cached_tokens`: whole
    blocks of 16 tokens found cached when the request was admitted, streamed or not."""
    prompt = list(range(300, 340))  # 40 token ids no other test of this module sends
    kwargs = {"model": "tiny", "prompt": prompt, "max_tokens": 2, "temperature": 0}
    first = client.completions.create(**kwargs)
    assert first.usage.prompt_tokens == 40 and first.usage.prompt_tokens_details.cached_tokens == 0
    again = client.completions.create(**kwargs)
    assert again.usage.prompt_tokens_details.cached_tokens == 32  # 2 blocks; 8 tokens in a third
    chunks = list(
        client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
    )
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 32
    other = client.completions.create(**{**kwargs, "extra_body": {"cache_salt": "elsewhere"}})
    assert other.usage.prompt_tokens_details.cached_tokens == 0  # another tenant's cache
