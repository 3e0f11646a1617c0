"""An OpenAI-compatible HTTP server: the API clients speak, in front of an `Engine`.

Five routes, on Starlette under uvicorn:

* ``POST /v1/chat/completions`` and ``POST /v1/completions`` generate, whole or
  streamed as server-sent events (``"stream": true``), with ``n`` choices;
* ``GET /v1/models`` names the one model served;
* ``GET /health`` answers while the server is up;
* ``GET /metrics`` is the Prometheus text of `llmserve_ref.serving.metrics`.

The handlers only translate: JSON in (`llmserve_ref.serving.openai_protocol`), prompt
token ids and `EngineRequest` objects to the engine, its token events back out
as chunks. The engine does the model work on its own thread, so the event loop
stays free to accept connections and write bytes while tokens are computed.

Three things every serving stack must get right are here in a few lines each:
a client that disconnects mid-stream has its generation cancelled (the stream's
``finally``); a buffering proxy is told not to buffer (``X-Accel-Buffering:
no``); and SIGINT/SIGTERM shut down gracefully: stop accepting, let in-flight
streams finish for up to ``shutdown_grace`` seconds, end the rest with a last
chunk whose ``finish_reason`` is ``"abort"``, and exit with status 0.

To run it: ``llmserve-ref serve`` (see `llmserve_ref.cli`), or in-process,
on a free port, for tests and pages:

>>> from openai import OpenAI
>>> with serve_in_thread("tiny", port=0) as server:
...     client = OpenAI(base_url=server.base_url, api_key="none")
...     reply = client.completions.create(model="tiny", prompt="Once upon a time,",
...                                       max_tokens=6, temperature=0)
>>> reply.choices[0].text, reply.usage.completion_tokens
(' there was a...', 6)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmserve_ref.engine.batched_engine import BatchedEngine, EngineConfig
from llmserve_ref.engine.interface import (
    Engine,
    EngineRequest,
    EngineUnavailable,
    RequestStream,
    Timings,
    TokenEvent,
)
from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.model.chat_template import render
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.serving.metrics import ServerMetrics
from llmserve_ref.serving.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    choice,
    choice_delta,
    completion_object,
    parse,
    sse,
    timings,
    usage,
)

ENDPOINTS = ("/v1/models", "/v1/completions", "/v1/chat/completions", "/health", "/metrics")
# Server-sent events, unbuffered: `X-Accel-Buffering: no` tells nginx (and proxies that
# copy it) to pass each event on at once instead of collecting a buffer full first.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# --8<-- [start:merge]
async def merge(streams: list[RequestStream]) -> AsyncIterator[tuple[int, TokenEvent]]:
    """The events of several streams (the ``n`` choices of a request) as they arrive."""
    pending = {asyncio.ensure_future(s.__anext__()): i for i, s in enumerate(streams)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=pending.__getitem__):
                i, event = pending.pop(task), task.result()
                yield i, event
                if event.finish_reason is None:
                    pending[asyncio.ensure_future(streams[i].__anext__())] = i
    finally:
        for task in pending:
            task.cancel()


# --8<-- [end:merge]


@dataclass
class RequestProgress:
    """One request's choices as they stream: text, token counts, timings, and the metrics."""

    metrics: ServerMetrics
    n: int
    prompt_n: int
    arrival: float

    def __post_init__(self) -> None:
        self.texts = [""] * self.n
        self.tokens = [0] * self.n
        self.last_token_at: list[float | None] = [None] * self.n
        self.finish_reasons: list[str | None] = [None] * self.n
        self.timings: list[Timings] = []

    def record(self, i: int, event: TokenEvent) -> None:
        now = time.perf_counter()
        self.texts[i] += event.text
        if event.token_id is not None:
            if not any(self.tokens):
                self.metrics.ttft.observe(now - self.arrival)
            if self.last_token_at[i] is not None:
                self.metrics.itl.observe(now - self.last_token_at[i])
            self.last_token_at[i] = now
            self.tokens[i] += 1
            self.metrics.generation_tokens.inc()
        if event.finish_reason is not None:
            self.finish_reasons[i] = event.finish_reason
            self.timings.append(event.timings)
            if event.finish_reason == "abort":
                self.metrics.cancelled.inc()

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.finish_reasons)

    def usage(self) -> dict:
        return usage(self.prompt_n, sum(self.tokens))

    def timings_json(self) -> dict:
        """All choices together: generated tokens add up; times are the longest choice's."""
        return timings(
            Timings(
                self.prompt_n,
                max(t.prompt_ms for t in self.timings),
                sum(t.predicted_n for t in self.timings),
                max(t.predicted_ms for t in self.timings),
            )
        )


class EventStream(StreamingResponse):
    """Server-sent events. When the response ends, however it ends (the client went away,
    the server stopped), the event generator is closed, so its ``finally`` runs now."""

    def __init__(self, events: AsyncIterator[str]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=SSE_HEADERS)
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()


class OpenAIServer:
    """The route handlers, around one engine serving one model."""

    def __init__(self, engine: Engine, model: str) -> None:
        self.engine, self.model = engine, model
        self.metrics = ServerMetrics(engine)
        self.created = int(time.time())

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.model,
            "object": "model",
            "created": self.created,
            "owned_by": "llmserve-ref",
            "max_model_len": self.engine.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.render(), media_type=self.metrics.content_type)

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, chat=True)

    # --8<-- [start:generate]
    async def generate(self, request: Request, chat: bool) -> Response:
        """Validate, submit ``n`` sequences to the engine, answer whole or streamed."""
        arrival = time.perf_counter()
        body = parse(await request.body(), ChatCompletionRequest if chat else CompletionRequest)
        if body.model != self.model:
            raise OpenAIError(
                f"The model '{body.model}' does not exist; this server serves '{self.model}'.",
                status=404,
                param="model",
                code="model_not_found",
            )
        prompt_ids = self.prompt_ids(body)
        requests = self.engine_requests(body, prompt_ids)
        try:
            streams = [self.engine.submit(r) for r in requests]
        except EngineUnavailable as error:
            raise OpenAIError(str(error), 503, code="shutting_down", type="server_error") from None
        self.metrics.prompt_tokens.inc(len(prompt_ids) * len(requests))
        progress = RequestProgress(self.metrics, len(streams), len(prompt_ids), arrival)
        head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": self.model,
        }
        if body.stream:
            events = self.stream(chat, head, streams, progress, body.include_usage)
            return EventStream(self.cancel_when_closed(events, streams))
        async for i, event in self.cancel_when_closed(merge(streams), streams):
            progress.record(i, event)
        choices = [
            choice(chat, i, progress.texts[i], progress.finish_reasons[i])
            for i in range(len(streams))
        ]
        kind = "chat.completion" if chat else "text_completion"
        return JSONResponse(
            completion_object(
                kind,
                **head,
                choices=choices,
                usage=progress.usage(),
                timings=progress.timings_json(),
            )
        )

    # --8<-- [end:generate]

    # --8<-- [start:stream]
    async def stream(
        self,
        chat: bool,
        head: dict,
        streams: list[RequestStream],
        progress: RequestProgress,
        include_usage: bool,
    ) -> AsyncIterator[str]:
        """The SSE body: a role chunk (chat), text deltas, a finish chunk per choice,
        the usage chunk if asked for, ``[DONE]``. Timings ride on the last chunk."""
        kind = "chat.completion.chunk" if chat else "text_completion"
        extra = {"usage": None} if include_usage else {}

        def chunk(choices: list[dict], **more: object) -> str:
            return sse(completion_object(kind, **head, choices=choices, **{**extra, **more}))

        if chat:
            yield chunk(
                [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                    for i in range(len(streams))
                ]
            )
        async for i, event in merge(streams):
            progress.record(i, event)
            if event.text:
                yield chunk([choice_delta(chat, i, event.text, None)])
            if event.finish_reason is not None:
                last = progress.done and not include_usage
                more = {"timings": progress.timings_json()} if last else {}
                yield chunk([choice_delta(chat, i, None, event.finish_reason)], **more)
        if include_usage:
            yield chunk([], usage=progress.usage(), timings=progress.timings_json())
        yield sse("[DONE]")

    async def cancel_when_closed(
        self, events: AsyncIterator, streams: list[RequestStream]
    ) -> AsyncIterator:
        """Pass `events` on; if they stop early (the client left), cancel what is unfinished."""
        try:
            async for event in events:
                yield event
        finally:
            for s in streams:
                if not s.finished:
                    self.engine.cancel(s.request_id)
                    self.metrics.cancelled.inc()

    # --8<-- [end:stream]

    def prompt_ids(self, body: CompletionRequest | ChatCompletionRequest) -> list[int]:
        tokenizer = self.engine.tokenizer
        if isinstance(body, ChatCompletionRequest):
            return tokenizer.encode(
                render({"role": m.role, "content": m.text()} for m in body.messages)
            )
        if isinstance(body.prompt, str):
            return tokenizer.encode(body.prompt, add_bos=True)
        if not body.prompt or not all(0 <= t < tokenizer.vocab_size for t in body.prompt):
            raise OpenAIError(
                f"A prompt of token ids must be non-empty, each id in [0, {tokenizer.vocab_size}).",
                param="prompt",
                code="invalid_value",
            )
        return list(body.prompt)

    # --8<-- [start:engine_requests]
    def engine_requests(
        self, body: CompletionRequest | ChatCompletionRequest, prompt_ids: list[int]
    ) -> list[EngineRequest]:
        """The body's ``n`` sequences, checked against the context length and the samplers."""
        chat = isinstance(body, ChatCompletionRequest)
        what, limit, used = (
            ("messages" if chat else "prompt"),
            self.engine.max_model_len,
            len(prompt_ids),
        )
        room = limit - used
        if room < 1:
            raise OpenAIError(
                f"This model's maximum context length is {limit} tokens. However, your {what} "
                f"resulted in {used} tokens, leaving no room for a completion. Please reduce "
                f"the length of the {what}.",
                param=what,
                code="context_length_exceeded",
            )
        max_tokens, field = body.token_limit()
        if max_tokens is None:
            max_tokens = room if chat else min(16, room)  # OpenAI's defaults
        if max_tokens > room:
            raise OpenAIError(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{used + max_tokens} tokens ({used} in the {what}, {max_tokens} in the "
                f"completion). Please reduce the length of the {what} or {field}.",
                param=field,
                code="context_length_exceeded",
            )
        try:
            params = SamplingParams(
                temperature=body.temperature,
                top_k=body.top_k,
                top_p=body.top_p,
                min_p=body.min_p,
                repetition_penalty=body.repetition_penalty,
                frequency_penalty=body.frequency_penalty,
                presence_penalty=body.presence_penalty,
                seed=body.seed,
            )
        except ValueError as error:  # SamplingParams' messages start with the field's name
            raise OpenAIError(
                str(error), param=str(error).split()[0], code="invalid_value"
            ) from None
        # Choice i samples with seed + i: reproducible, yet the n choices differ. Choices
        # after the first are forks of it: a paged engine shares the prompt's KV blocks.
        seeds = [None if body.seed is None else body.seed + i for i in range(body.n)]
        requests: list[EngineRequest] = []
        for seed in seeds:
            requests.append(
                EngineRequest(
                    prompt_ids,
                    dataclasses.replace(params, seed=seed),
                    max_tokens,
                    body.stop_strings(),
                    ignore_eos=body.ignore_eos,
                    cache_salt=body.cache_salt,
                    fork_of=requests[0].request_id if requests else None,
                )
            )
        return requests

    # --8<-- [end:engine_requests]


class CountRequests:
    """ASGI middleware: count every response by endpoint and status code."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in ENDPOINTS else "other"

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.requests.inc(endpoint=endpoint, status=str(message["status"]))
            await send(message)

        await self.app(scope, receive, counting_send)


async def _openai_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, OpenAIError)
    return JSONResponse(error.body(), status_code=error.status)


async def _http_error(request: Request, error: Exception) -> Response:
    """404 and 405 from routing, in OpenAI's error body."""
    assert isinstance(error, HTTPException)
    where = f"{request.method} {request.url.path}"
    if error.status_code == 405:
        body = OpenAIError(f"Method not allowed: {where}.", 405, code="method_not_allowed")
    else:
        body = OpenAIError(
            f"Unknown request URL: {where}. Please check the URL for typos.",
            error.status_code,
            code="unknown_url",
        )
    return JSONResponse(body.body(), status_code=body.status, headers=error.headers)


async def _server_error(request: Request, error: Exception) -> Response:
    """A bug, not the client's fault: still an OpenAI error body, and the server goes on."""
    body = OpenAIError(f"Internal server error: {error!r}", 500, type="server_error")
    return JSONResponse(body.body(), status_code=500)


def create_app(engine: Engine, model: str) -> Starlette:
    """The ASGI app serving `engine` under the model name `model`."""
    api = OpenAIServer(engine, model)
    app = Starlette(
        routes=[
            Route("/v1/models", api.models, methods=["GET"]),
            Route("/v1/completions", api.completions, methods=["POST"]),
            Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
            Route("/health", api.health, methods=["GET"]),
            Route("/metrics", api.metrics_text, methods=["GET"]),
        ],
        middleware=[Middleware(CountRequests, metrics=api.metrics)],
        exception_handlers={
            OpenAIError: _openai_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )
    app.state.api = api
    return app


# --8<-- [start:graceful]
class GracefulServer(uvicorn.Server):
    """uvicorn's server, plus: drain the engine on shutdown, announce the URL, exit 0."""

    def __init__(
        self,
        config: uvicorn.Config,
        engine: Engine,
        shutdown_grace: float,
        announce: str | None = None,
    ) -> None:
        super().__init__(config)
        self.engine, self.shutdown_grace, self.announce = engine, shutdown_grace, announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self.announce:
            print(self.announce, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # New requests get 503; in-flight ones finish, or end with "abort" after the grace.
        self.engine.drain(self.shutdown_grace)
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM start the graceful shutdown. Unlike uvicorn, don't re-raise the
        signal afterwards: a server that shut down as asked exits with status 0."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


# --8<-- [end:graceful]


# --8<-- [start:bind]
def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on (`host`, `port`), with Nagle's algorithm off; port 0: any free one.

    Streaming writes many small segments: the response headers, then one event per token.
    With Nagle's algorithm on, a small segment waits until the previous one is acknowledged,
    and the client, with nothing to send, delays its acknowledgement by up to 40 ms (Linux's
    delayed ACK): every response on a reused connection would start about 40 ms late.
    asyncio turns Nagle off only on sockets it recognises as TCP by their protocol number,
    which `socket.create_server` leaves at 0, so it is switched off here; the connections the
    server accepts inherit the option.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


# --8<-- [end:bind]


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def load_engine(
    model: str = "tiny", kind: str = "batched", config: EngineConfig | None = None
) -> Engine:
    """The engine ``llmserve-ref serve`` runs: "batched" (the default) or "loop" (the baseline)."""
    if kind == "loop":
        return LoopEngine.load(model)
    if kind != "batched":
        raise ValueError(f"engine is 'batched' or 'loop', got {kind!r}")
    return BatchedEngine.load(model, config=config)


def kv_cache_report(engine: BatchedEngine) -> str:
    """What vLLM logs at startup: the KV cache's size, and how many longest requests fit."""
    tokens = engine.num_blocks * engine.config.block_size
    mib = engine.num_blocks * engine.bytes_per_block / 2**20
    return (
        f"KV cache: {engine.num_blocks} blocks of {engine.config.block_size} tokens "
        f"({tokens:,} tokens, {mib:.1f} MiB); maximum concurrency for {engine.max_model_len} "
        f"tokens per request: {tokens / engine.max_model_len:.1f}x"
    )


def serve(
    model: str = "tiny",
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown_grace: float = 5.0,
    log_level: str = "info",
    engine: str = "batched",
    engine_config: EngineConfig | None = None,
) -> None:
    """Serve `model` until SIGINT or SIGTERM (what ``llmserve-ref serve`` runs)."""
    engine = load_engine(model, engine, engine_config)
    if isinstance(engine, BatchedEngine):
        print(f"llmserve-ref: {kv_cache_report(engine)}", flush=True)
    sock = _bind(host, port)
    config = uvicorn.Config(
        create_app(engine, model),
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=shutdown_grace + 5,
    )
    announce = f"llmserve-ref: serving {model} at {_url(sock)}/v1"
    try:
        GracefulServer(config, engine, shutdown_grace, announce).run(sockets=[sock])
    finally:
        sock.close()
        engine.close()


# --8<-- [start:serve_in_thread]
@dataclass
class RunningServer:
    """A server running in this process: where it listens, its engine and its metrics."""

    url: str  # http://127.0.0.1:PORT, for /health and /metrics
    engine: Engine
    metrics: ServerMetrics

    @property
    def base_url(self) -> str:
        """What OpenAI clients take as `base_url` (and `OPENAI_BASE_URL`)."""
        return f"{self.url}/v1"


@contextlib.contextmanager
def serve_in_thread(
    model: str = "tiny",
    host: str = "127.0.0.1",
    port: int = 0,
    engine: Engine | None = None,
    shutdown_grace: float = 5.0,
) -> Iterator[RunningServer]:
    """Run the server on a thread of this process while the ``with`` block runs.

    Port 0 (the default) picks a free port. The engine is a `BatchedEngine` serving
    `model` unless one is passed in; leaving the block shuts the server down gracefully.
    """
    own_engine = engine is None
    engine = load_engine(model) if engine is None else engine
    app = create_app(engine, model)
    sock = _bind(host, port)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", timeout_graceful_shutdown=shutdown_grace + 5
    )
    server = GracefulServer(config, engine, shutdown_grace)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread stopped before it started serving")
            time.sleep(0.01)
        yield RunningServer(_url(sock), engine, app.state.api.metrics)
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
        if own_engine:
            engine.close()


# --8<-- [end:serve_in_thread]
