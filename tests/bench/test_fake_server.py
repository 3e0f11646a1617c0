"""The fake server plays the latencies and faults it is configured with, and nothing else.

Most checks drive the ASGI application in memory (a `receive` and a `send` written here),
so responses, faults and usage are checked exactly, request by request. Timing is checked
the one way a loaded machine cannot break, from below (the server never sends early), and
from above only with margins of several times the configured value. One test runs
`serve_fake` over real sockets, as a benchmark client sees it.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
from dataclasses import dataclass

import httpx
import pytest

from llmserve_ref.bench.fake_server import WORDS, FakeConfig, FakeServer, serve_fake, sse_events


@dataclass
class Response:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    times: list[float]  # when each body message was sent (loop.time())

    def events(self) -> list[dict | str]:
        """The `data:` payloads of an event stream, parsed ([DONE] as the string)."""
        frames = self.body.decode().split("\n\n")
        assert frames[-1] == "", "a stream ends with a blank line"
        payloads = [f.removeprefix("data: ") for f in frames[:-1]]
        assert all(f.startswith("data: ") for f in frames[:-1])
        return [p if p == "[DONE]" else json.loads(p) for p in payloads]

    def json(self) -> dict:
        return json.loads(self.body)


async def call(
    app: FakeServer,
    method: str,
    path: str,
    body: dict | None = None,
    parts: int = 1,
    streaming: asyncio.Event | None = None,
) -> Response:
    """One request to `app`, its body delivered in `parts` messages, the response recorded;
    `streaming` is set when the first body message goes out."""
    loop = asyncio.get_running_loop()
    data = b"" if body is None else json.dumps(body).encode()
    size = math.ceil(len(data) / parts) or 1
    pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    messages = [
        {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]
    sent: list[tuple[float, dict]] = []

    async def receive() -> dict:
        return messages.pop(0)

    async def send(message: dict) -> None:
        sent.append((loop.time(), message))
        if streaming is not None and message["type"] == "http.response.body":
            streaming.set()

    await app({"type": "http", "method": method, "path": path}, receive, send)
    start, *body_messages = [m for _, m in sent]
    assert start["type"] == "http.response.start"
    assert [m.get("more_body", False) for m in body_messages][-1] is False  # it ends
    return Response(
        status=start["status"],
        headers=dict(start["headers"]),
        body=b"".join(m["body"] for m in body_messages),
        times=[t for t, m in sent[1:]],
    )


def stream(app: FakeServer, kind: str = "completions", **request) -> Response:
    path = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}[kind]
    if kind == "chat":
        request.setdefault("messages", [{"role": "user", "content": "tell me a story"}])
    else:
        request.setdefault("prompt", "once upon a time")
    return asyncio.run(call(app, "POST", path, {"stream": True, **request}))


FAST = FakeConfig(ttft=0.0, itl=0.0)  # for everything but timing


# --- what one response holds ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["completions", "chat"])
@pytest.mark.parametrize(("num_tokens", "per_chunk"), [(1, 1), (5, 1), (5, 2), (6, 3)])
def test_sse_events_carry_the_tokens_in_chunks_with_the_configured_delays(
    kind, num_tokens, per_chunk
):
    config = FakeConfig(ttft=0.3, itl=0.1, tokens_per_chunk=per_chunk, model="m")
    events = list(sse_events(config, kind, num_tokens, prompt_tokens=4, usage=True))
    if kind == "chat":  # the role chunk first, at once, with no content
        delay, role = events.pop(0)
        assert delay == 0.0
        assert json.loads(role)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    *chunks, (usage_delay, usage) = [(d, json.loads(p)) for d, p in events]
    count = math.ceil(num_tokens / per_chunk)
    assert [d for d, _ in chunks] == [0.3] + [0.1] * (count - 1)
    choices = [c["choices"][0] for _, c in chunks]
    texts = [c["delta"]["content"] if kind == "chat" else c["text"] for c in choices]
    words = [WORDS[i % len(WORDS)] for i in range(num_tokens)]
    assert "".join(texts) == "".join(" " + w for w in words)
    assert [len(t.split()) for t in texts] == [min(per_chunk, num_tokens - i * per_chunk)
                                               for i in range(count)]  # fmt: skip
    assert [c["finish_reason"] for c in choices] == [None] * (count - 1) + ["length"]
    expected_object = "chat.completion.chunk" if kind == "chat" else "text_completion"
    assert {c["object"] for _, c in chunks} == {expected_object}
    assert {c["model"] for _, c in chunks} == {"m"}
    assert usage_delay == 0.0 and usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": num_tokens,
        "total_tokens": 4 + num_tokens,
    }


def test_a_streamed_completion_ends_with_done_and_counts_prompt_words():
    response = stream(
        FakeServer(FAST), prompt="one  two\nthree", max_tokens=3,
        stream_options={"include_usage": True},
    )  # fmt: skip
    assert response.status == 200
    assert response.headers[b"content-type"] == b"text/event-stream"
    *chunks, usage, done = response.events()
    assert done == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in chunks) == " once upon a"
    assert usage["usage"]["prompt_tokens"] == 3  # whitespace-separated words
    assert "usage" not in stream(FakeServer(FAST), max_tokens=3).events()[-2]


def test_chat_prompt_tokens_count_every_message():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "a b c"}]
    events = stream(FakeServer(FAST), "chat", messages=messages, max_tokens=2,
                    stream_options={"include_usage": True}).events()  # fmt: skip
    assert events[-2]["usage"]["prompt_tokens"] == 5


@pytest.mark.parametrize(
    ("request_fields", "tokens"),
    [({}, 16), ({"max_tokens": 5}, 5), ({"max_tokens": 5, "max_completion_tokens": 3}, 3)],
)
def test_max_completion_tokens_wins_and_16_is_the_default(request_fields, tokens):
    events = stream(FakeServer(FAST), stream_options={"include_usage": True}, **request_fields)
    assert events.events()[-2]["usage"]["completion_tokens"] == tokens


def test_the_body_may_come_in_several_messages():
    body = {"stream": True, "prompt": "x " * 200, "max_tokens": 2}
    response = asyncio.run(call(FakeServer(FAST), "POST", "/v1/completions", body, parts=7))
    assert response.status == 200 and response.events()[-1] == "[DONE]"


def test_models_routes_and_refusals():
    server = FakeServer(FakeConfig(model="fake-7b"))
    models = asyncio.run(call(server, "GET", "/v1/models"))
    assert (models.status, models.json()["data"]) == (200, [{"id": "fake-7b"}])
    for method, path in (("GET", "/v1/completions"), ("POST", "/v1/embeddings")):
        missing = asyncio.run(call(server, method, path))
        assert missing.status == 404 and path in missing.json()["error"]["message"]
    whole = asyncio.run(call(server, "POST", "/v1/completions", {"prompt": "hi"}))
    assert (whole.status, whole.json()["error"]["message"]) == (400, "this server only streams")


def test_non_http_scopes_are_ignored():
    async def never(*args):
        pytest.fail("a lifespan scope got a message")

    asyncio.run(FakeServer(FAST)({"type": "lifespan"}, never, never))


# --- faults -----------------------------------------------------------------------------------


def test_every_fail_every_th_request_gets_500():
    server = FakeServer(FakeConfig(ttft=0.0, itl=0.0, fail_every=3))
    responses = [stream(server, max_tokens=1) for _ in range(9)]
    assert [r.status for r in responses] == [200, 200, 500] * 3
    assert responses[8].json()["error"]["message"] == "injected failure (request 9)"
    assert stream(server, "chat", max_tokens=1).status == 200  # chat counts the same: 10th


@pytest.mark.parametrize(
    ("eos_after", "request_fields", "tokens", "reason"),
    [
        (3, {"max_tokens": 8}, 3, "stop"),
        (3, {"max_tokens": 8, "ignore_eos": True}, 8, "length"),
        (8, {"max_tokens": 8}, 8, "length"),  # the end token would come after max_tokens
        (None, {"max_tokens": 8}, 8, "length"),
    ],
)
def test_eos_after_stops_early_unless_ignore_eos(eos_after, request_fields, tokens, reason):
    server = FakeServer(FakeConfig(ttft=0.0, itl=0.0, eos_after=eos_after))
    *chunks, usage, _ = stream(server, stream_options={"include_usage": True},
                               **request_fields).events()  # fmt: skip
    assert usage["usage"]["completion_tokens"] == tokens == len(chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == reason


# --- timing -----------------------------------------------------------------------------------


def test_the_first_chunk_waits_ttft_and_each_next_one_itl():
    """Never early; and, with margins of several times the values, not much later."""
    config = FakeConfig(ttft=0.1, itl=0.05)

    async def timed() -> tuple[float, Response]:
        start = asyncio.get_running_loop().time()
        response = await call(FakeServer(config), "POST", "/v1/completions",
                              {"stream": True, "prompt": "x", "max_tokens": 6})  # fmt: skip
        return start, response

    start, response = asyncio.run(timed())
    first, *rest = response.times[:6]  # six token chunks, then [DONE]
    gaps = [b - a for a, b in zip([first, *rest], rest, strict=False)]
    assert len(gaps) == 5
    assert first - start >= 0.1 - 0.001
    assert all(gap >= 0.05 - 0.001 for gap in gaps)
    assert first - start < 0.1 * 5
    assert statistics.median(gaps) < 0.05 * 4


def test_a_stall_freezes_every_stream_for_its_length():
    """Request 2 arrives once request 1 has sent its first chunk, and stalls the server for
    0.5 s. Request 1 had 11 gaps of 50 ms to go: it ends at least 0.5 s + 10 gaps after
    request 2 arrived (alone, 0.55 s after at most), and request 2's one chunk comes after
    the stall."""
    config = FakeConfig(ttft=0.05, itl=0.05, stall_every=2, stall_seconds=0.5)
    server = FakeServer(config)
    body = {"stream": True, "prompt": "x", "max_tokens": 12}

    async def two() -> tuple[float, Response, Response, float]:
        streaming = asyncio.Event()
        first = asyncio.create_task(call(server, "POST", "/v1/completions", body, 1, streaming))
        await streaming.wait()
        arrived = asyncio.get_running_loop().time()
        second = await call(server, "POST", "/v1/completions", {**body, "max_tokens": 1})
        return arrived, await first, second, server.paused_until

    arrived, first, second, paused_until = asyncio.run(two())
    assert paused_until >= arrived + 0.5
    assert first.times[-1] >= paused_until + 10 * 0.05 - 0.001
    assert second.times[0] >= paused_until - 0.001  # the stalling request waits too
    assert first.events()[-1] == second.events()[-1] == "[DONE]"
    assert len(first.events()) == 12 + 1


def test_serve_fake_answers_over_http():
    with serve_fake(FakeConfig(ttft=0.0, itl=0.0, model="fake")) as url:
        assert httpx.get(f"{url}/v1/models").json()["data"] == [{"id": "fake"}]
        body = {"model": "fake", "prompt": "hi", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", f"{url}/v1/completions", json=body) as response:
            assert response.headers["content-type"] == "text/event-stream"
            lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    texts = [json.loads(line.removeprefix("data: "))["choices"][0]["text"] for line in lines[:-1]]
    assert "".join(texts) == " once upon a"
