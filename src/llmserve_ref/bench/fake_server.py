"""An OpenAI-compatible streaming server with known latencies, to check a benchmark client.

A benchmark client is itself a measuring instrument, and an instrument is checked
against a known reference. This server runs no model: it answers
``POST /v1/completions`` and ``POST /v1/chat/completions`` (``stream: true``)
with Server-Sent Events whose timing is set by a `FakeConfig`: the first chunk
after `ttft` seconds, then one chunk every `itl` seconds, each carrying
`tokens_per_chunk` tokens, until `max_tokens` tokens are out. With
``stream_options: {"include_usage": true}`` a last chunk carries the usage;
prompt tokens are counted as whitespace-separated words.

It can misbehave on purpose:

- `stall_every` / `stall_seconds`: every `stall_every`-th request to arrive
  freezes the whole server for `stall_seconds`: no stream makes progress, as in
  a garbage-collection pause or a stuck engine step. This is what makes
  coordinated omission visible.
- `eos_after`: a request stops after this many tokens with ``finish_reason:
  "stop"``, unless it sent ``ignore_eos: true``, like a model that says its end
  token early.
- `fail_every`: every `fail_every`-th request gets HTTP 500.

It is a plain ASGI application (no framework); `serve_fake` runs it under uvicorn on a
thread of this process, as the real server's `run_in_thread` runs any app.

>>> events = sse_events(FakeConfig(), "chat", 2, prompt_tokens=3, usage=True)
>>> [(delay, json.loads(payload)["choices"]) for delay, payload in events]
... # doctest: +NORMALIZE_WHITESPACE
[(0.0, [{'index': 0, 'delta': {'role': 'assistant', 'content': ''}, 'finish_reason': None}]),
 (0.05, [{'index': 0, 'delta': {'content': ' once'}, 'finish_reason': None}]),
 (0.02, [{'index': 0, 'delta': {'content': ' upon'}, 'finish_reason': 'length'}]),
 (0.0, [])]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from llmserve_ref.serving.transport import run_in_thread

WORDS = (
    "once",
    "upon",
    "a",
    "time",
    "there",
    "was",
    "a",
    "small",
    "fox",
    "who",
    "liked",
    "to",
    "count",
    "the",
    "stars",
)


# --8<-- [start:config]
@dataclass(frozen=True)
class FakeConfig:
    """The latencies the server injects (seconds) and the faults it plays."""

    ttft: float = 0.050
    itl: float = 0.020
    tokens_per_chunk: int = 1
    stall_every: int = 0
    stall_seconds: float = 1.0
    eos_after: int | None = None
    fail_every: int = 0
    model: str = "fake"


# --8<-- [end:config]


def sse_events(
    config: FakeConfig,
    kind: str,
    num_tokens: int,
    prompt_tokens: int,
    usage: bool,
    finish_reason: str = "length",
) -> Iterator[tuple[float, str]]:
    """(delay before it, `data:` payload) of each event of one response, without ``[DONE]``.

    A chat response opens at once with an empty chunk that only names the role,
    as OpenAI's and vLLM's do: a client must not take it for the first token.
    """
    created = int(time.time())
    base = {"id": "cmpl-fake", "created": created, "model": config.model}
    if kind == "chat":
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        yield 0.0, json.dumps({**base, "object": "chat.completion.chunk", "choices": [choice]})
    chunks = range(0, num_tokens, config.tokens_per_chunk)
    for n, start in enumerate(chunks):
        count = min(config.tokens_per_chunk, num_tokens - start)
        text = "".join(" " + WORDS[(start + i) % len(WORDS)] for i in range(count))
        reason = finish_reason if n == len(chunks) - 1 else None
        delay = config.ttft if n == 0 else config.itl
        if kind == "chat":
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": reason}
            yield (
                delay,
                json.dumps({**base, "object": "chat.completion.chunk", "choices": [choice]}),
            )
        else:
            choice = {"index": 0, "text": text, "finish_reason": reason}
            yield delay, json.dumps({**base, "object": "text_completion", "choices": [choice]})
    if usage:
        counts = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": num_tokens,
            "total_tokens": prompt_tokens + num_tokens,
        }
        yield 0.0, json.dumps({**base, "choices": [], "usage": counts})


class FakeServer:
    """The ASGI application: `await server(scope, receive, send)`."""

    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.arrivals = itertools.count(1)
        self.paused_until = 0.0  # loop.time() until which every stream is frozen

    async def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, then for as long as a stall is in force."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(seconds)
        while (left := self.paused_until - loop.time()) > 0:
            await asyncio.sleep(left)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if scope["method"] == "GET" and path == "/v1/models":
            await _reply(send, 200, {"object": "list", "data": [{"id": self.config.model}]})
            return
        kinds = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
        if scope["method"] != "POST" or path not in kinds:
            await _reply(send, 404, {"error": {"message": f"no route {path}"}})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = json.loads(body)
        await self.stream(kinds[path], request, send)

    async def stream(self, kind: str, request: dict, send: Any) -> None:
        cfg, n = self.config, next(self.arrivals)
        if cfg.fail_every and n % cfg.fail_every == 0:
            await _reply(send, 500, {"error": {"message": f"injected failure (request {n})"}})
            return
        if cfg.stall_every and n % cfg.stall_every == 0:
            loop = asyncio.get_running_loop()
            self.paused_until = max(self.paused_until, loop.time() + cfg.stall_seconds)
        if not request.get("stream"):
            await _reply(send, 400, {"error": {"message": "this server only streams"}})
            return
        prompt = request.get("prompt") or " ".join(m["content"] for m in request["messages"])
        max_tokens = request.get("max_completion_tokens") or request.get("max_tokens") or 16
        num_tokens, reason = max_tokens, "length"
        stops_early = cfg.eos_after is not None and cfg.eos_after < max_tokens
        if stops_early and not request.get("ignore_eos"):
            num_tokens, reason = cfg.eos_after, "stop"
        usage = bool((request.get("stream_options") or {}).get("include_usage"))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        events = sse_events(cfg, kind, num_tokens, len(prompt.split()), usage, reason)
        for delay, event in events:
            await self._wait(delay)
            await send(
                {
                    "type": "http.response.body",
                    "body": f"data: {event}\n\n".encode(),
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _reply(send: Any, status: int, payload: dict) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


@contextmanager
def serve_fake(config: FakeConfig, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve a `FakeServer` playing `config` on a free port of `host`, on a thread, while
    the ``with`` block runs; yield its base URL."""
    app = FakeServer(config)
    settings = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    with run_in_thread(uvicorn.Server(settings), host) as url:
        yield url
