"""An OpenAI-compatible HTTP server: the API clients speak, in front of an `Engine`.

Six routes, on Starlette under uvicorn:

* ``POST /v1/chat/completions`` and ``POST /v1/completions`` generate, whole or
  streamed as server-sent events (``"stream": true``), with ``n`` choices;
* ``GET /v1/models`` names the one model served;
* ``GET /health`` answers while the server is up;
* ``GET /metrics`` is the Prometheus text of `llmserve_ref.serving.metrics`;
* ``GET /openapi.json`` describes them all (`llmserve_ref.serving.openapi`).

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

A shared server must also refuse what would cost everyone else, before it costs:
`llmserve_ref.serving.limits` bounds the body, the prompt, the stop strings, the queue
and how long a client may take to send (each refusal an OpenAI error naming the limit),
and `Access` sets an API key for ``/v1/*`` and the web origins allowed to call it.

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
import hmac
import ipaddress
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.auto import AutoHTTPProtocol

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
from llmserve_ref.model.sampling import TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.serving.limits import Limits, check_prompt_chars
from llmserve_ref.serving.metrics import ServerMetrics
from llmserve_ref.serving.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIError,
    choice,
    choice_delta,
    completion_object,
    echo_text,
    encode_prompt,
    engine_requests,
    logprobs_json,
    parse,
    sse,
    timings,
    usage,
)
from llmserve_ref.serving.openapi import openapi_document

ENDPOINTS = (
    "/v1/models",
    "/v1/completions",
    "/v1/chat/completions",
    "/health",
    "/metrics",
    "/openapi.json",
)
# Server-sent events, unbuffered: `X-Accel-Buffering: no` tells nginx (and proxies that
# copy it) to pass each event on at once instead of collecting a buffer full first.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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


@dataclass
class RequestProgress:
    """One request's choices as they stream: text, token counts, timings, and the metrics."""

    metrics: ServerMetrics
    n: int
    prompt_n: int
    arrival: float
    echo: str = ""  # the text every choice starts with (a completion's ``echo``)

    def __post_init__(self) -> None:
        self.texts = [self.echo] * self.n
        self.tokens = [0] * self.n
        self.logprobs: list[list[tuple[int, TokenLogprobs]]] = [[] for _ in range(self.n)]
        self.logprobs_sent = [0] * self.n  # how many of each choice's are in a response
        self.text_offsets = [len(self.echo)] * self.n  # where the next unsent token starts
        self.last_token_at: list[float | None] = [None] * self.n
        self.finish_reasons: list[str | None] = [None] * self.n
        self.timings: list[Timings] = []
        self.num_cached_tokens = 0  # of the prompt all choices share

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
            if event.logprobs is not None:
                self.logprobs[i].append((event.token_id, event.logprobs))
        if event.finish_reason is not None:
            self.finish_reasons[i] = event.finish_reason
            self.timings.append(event.timings)
            self.num_cached_tokens = max(self.num_cached_tokens, event.num_cached_tokens)
            if event.finish_reason == "abort":
                self.metrics.cancelled.inc()

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.finish_reasons)

    def logprobs_json(self, i: int, chat: bool, tokenizer: Tokenizer) -> dict | None:
        """The logprobs of choice `i`'s tokens not yet sent, as the API shapes them (None
        if there are none), now counted as sent."""
        tokens = self.logprobs[i][self.logprobs_sent[i] :]
        if not tokens:
            return None
        self.logprobs_sent[i] = len(self.logprobs[i])
        body = logprobs_json(chat, tokens, tokenizer, self.text_offsets[i])
        if not chat:
            self.text_offsets[i] += sum(map(len, body["tokens"]))
        return body

    def usage(self) -> dict:
        return usage(self.prompt_n, sum(self.tokens), self.num_cached_tokens)

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
    the server stopped), the event generator is closed, so its ``finally`` runs now, and
    `on_close` runs too: a generator the response never started has no ``finally`` to run."""

    def __init__(self, events: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=SSE_HEADERS)
        self.events, self.on_close = events, on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.events.aclose()
            self.on_close()


class OpenAIServer:
    """The route handlers, around one engine serving one model."""

    def __init__(self, engine: Engine, model: str, limits: Limits) -> None:
        self.engine, self.model, self.limits = engine, model, limits
        self.metrics = ServerMetrics(engine)
        self.created = int(time.time())
        self.in_flight: set[str] = set()  # request ids submitted and not yet released
        self.max_token_chars = engine.tokenizer.max_token_chars

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

    async def openapi(self, request: Request) -> Response:
        """This server's OpenAPI document: what clients and fuzzers generate requests from."""
        return JSONResponse(openapi_document(self.model))

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, chat=True)

    async def generate(self, request: Request, chat: bool) -> Response:
        """Validate, submit ``n`` sequences to the engine, answer whole or streamed."""
        arrival = time.perf_counter()
        body = parse(
            await self.read_body(request), ChatCompletionRequest if chat else CompletionRequest
        )
        if body.model != self.model:
            raise OpenAIError(
                f"The model '{body.model}' does not exist; this server serves '{self.model}'.",
                status=404,
                param="model",
                code="model_not_found",
            )
        self.limits.check_stop(body.stop_strings())
        self.check_prompt_chars(body)
        # Tokenizing takes time in proportion to the prompt: on a worker thread, the event
        # loop goes on writing every other client's tokens meanwhile.
        tokenizer = self.engine.tokenizer
        prompt_ids = await asyncio.to_thread(encode_prompt, body, tokenizer)
        requests = engine_requests(
            body, prompt_ids, self.engine.max_model_len, tokenizer.vocab_size
        )
        streams = self.submit(requests)
        self.metrics.prompt_tokens.inc(len(prompt_ids) * len(requests))
        echo = echo_text(body, prompt_ids, tokenizer)
        progress = RequestProgress(self.metrics, len(streams), len(prompt_ids), arrival, echo)
        head = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": self.model,
        }
        if body.stream:
            events = self.stream(chat, head, streams, progress, body.include_usage)
            return EventStream(
                self.cancel_when_closed(events, streams), lambda: self.release(streams)
            )
        if not await self.collect_unless_gone(request, streams, progress):
            return Response(status_code=499)  # nginx's "client closed request": nobody reads it
        choices = [
            choice(
                chat,
                i,
                progress.texts[i],
                progress.finish_reasons[i],
                progress.logprobs_json(i, chat, tokenizer),
            )
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
        if progress.echo:  # each completion choice's text starts with the prompt
            yield chunk([choice_delta(chat, i, progress.echo, None) for i in range(len(streams))])
        tokenizer = self.engine.tokenizer
        async for i, event in merge(streams):
            progress.record(i, event)
            # A token's logprobs ride on the next chunk that carries text (a token that
            # shows none yet, half a character or a maybe-stop string, waits for it).
            if event.text:
                logprobs = progress.logprobs_json(i, chat, tokenizer)
                yield chunk([choice_delta(chat, i, event.text, None, logprobs)])
            if event.finish_reason is not None:
                last = progress.done and not include_usage
                more = {"timings": progress.timings_json()} if last else {}
                logprobs = progress.logprobs_json(i, chat, tokenizer)
                yield chunk([choice_delta(chat, i, None, event.finish_reason, logprobs)], **more)
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
            self.release(streams)

    # --8<-- [end:stream]

    # --8<-- [start:admission]
    async def collect_unless_gone(
        self, request: Request, streams: list[RequestStream], progress: RequestProgress
    ) -> bool:
        """Read every event of `streams` into `progress`, unless the client disconnects
        first: then cancel them all and return False."""

        async def collect() -> None:
            async for i, event in self.cancel_when_closed(merge(streams), streams):
                progress.record(i, event)

        work, gone = asyncio.ensure_future(collect()), asyncio.ensure_future(disconnected(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not work.done():
                work.cancel()  # its cancel_when_closed releases the sequences
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        if work.cancelled():
            return False
        work.result()  # a failure inside a choice is raised here (and the rest released)
        return True

    async def read_body(self, request: Request) -> bytes:
        """The JSON body: refused unless it is JSON (415), not too big (413), and sent in
        time (408). A body announced as too big is refused before a byte of it is read;
        a client that leaves halfway gets nginx's 499, which nobody reads but /metrics."""
        check_json_content_type(request.headers.get("content-type"))
        self.limits.check_content_length(request.headers.get("content-length"))
        try:
            return await asyncio.wait_for(self.read_capped(request), self.limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise OpenAIError(
                f"The request body did not arrive within {self.limits.body_timeout_s} s.",
                408,
                code="request_timeout",
            ) from None
        except ClientDisconnect:
            raise OpenAIError(
                "The client disconnected before sending its whole body.",
                499,
                code="client_disconnected",
            ) from None

    async def read_capped(self, request: Request) -> bytes:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.limits.max_request_bytes:
                raise self.limits.too_large()
        return bytes(body)

    def check_prompt_chars(self, body: CompletionRequest | ChatCompletionRequest) -> None:
        if isinstance(body, ChatCompletionRequest):
            chars = sum(len(m.text()) for m in body.messages)
        else:
            chars = len(body.prompt)  # token ids: at most one "character" each
        limit = self.engine.max_model_len
        check_prompt_chars(chars, limit, self.max_token_chars, body.prompt_field)

    def submit(self, requests: list[EngineRequest]) -> list[RequestStream]:
        """Submit all of `requests` or none: room for them all is checked first (429), and
        if the engine refuses one, those already submitted are cancelled."""
        self.limits.check_room(len(self.in_flight), len(requests))
        streams: list[RequestStream] = []
        try:
            for r in requests:
                streams.append(self.engine.submit(r))
                self.in_flight.add(r.request_id)
        except BaseException as error:
            self.release(streams)
            if isinstance(error, EngineUnavailable):
                raise OpenAIError(
                    str(error), 503, code="shutting_down", type="server_error"
                ) from None
            raise
        return streams

    def release(self, streams: list[RequestStream]) -> None:
        """Cancel what is unfinished of `streams` and give their places back. Idempotent:
        the end of the events and the close of the response both call it."""
        for s in streams:
            if s.request_id in self.in_flight:
                self.in_flight.discard(s.request_id)
                if not s.finished:
                    self.engine.cancel(s.request_id)
                    self.metrics.cancelled.inc()

    # --8<-- [end:admission]


async def disconnected(request: Request) -> None:
    """Return when the client has gone. Once its body is read, the only message that can
    come is ``http.disconnect`` (uvicorn sends it when the connection is lost)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def check_json_content_type(content_type: str | None) -> None:
    """Refuse a body not sent as JSON. A browser sends ``text/plain`` from any web page
    without asking (a "simple" request, no CORS preflight): without this check, any page
    a user visits could make their local server generate."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise OpenAIError(
            f"Send the body as JSON, with 'Content-Type: application/json'; got "
            f"{content_type or 'no Content-Type'!r}.",
            415,
            code="unsupported_media_type",
        )


class RequireApiKey:
    """ASGI middleware: `/v1/*` needs ``Authorization: Bearer <key>``, as vLLM's --api-key;
    otherwise 401 with OpenAI's error body. CORS preflights (OPTIONS) carry no key."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"].startswith("/v1/")
            and scope["method"] != "OPTIONS"
            and not hmac.compare_digest(
                dict(scope["headers"]).get(b"authorization", b""), self.expected
            )
        ):
            error = OpenAIError(
                "Incorrect API key provided. Send the key the server was started with "
                "(--api-key or LLMSERVE_API_KEY) as 'Authorization: Bearer <key>'.",
                401,
                code="invalid_api_key",
            )
            response = JSONResponse(error.body(), 401, headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        await self.app(scope, receive, send)


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
    headers = {"Retry-After": "1"} if error.status == 429 else None  # seconds
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


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


@dataclass(frozen=True)
class Access:
    """Who may use the server: the API key `/v1/*` needs (None: anyone who can connect),
    and the web origins whose pages may call it from a browser (CORS; none by default)."""

    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()


class App(Starlette):
    """Starlette, with every response counted, the 500s that its outermost middleware
    makes of unhandled errors included (a middleware in Starlette's list sits inside it)."""

    def __init__(self, metrics: ServerMetrics, **kwargs: object) -> None:
        self.metrics = metrics
        super().__init__(**kwargs)

    def build_middleware_stack(self) -> ASGIApp:
        return CountRequests(super().build_middleware_stack(), self.metrics)


def create_app(
    engine: Engine, model: str, limits: Limits | None = None, access: Access | None = None
) -> Starlette:
    """The ASGI app serving `engine` under the model name `model`."""
    api = OpenAIServer(engine, model, limits or Limits())
    access = access or Access()
    middleware = []
    if access.allowed_origins:  # outermost: a preflight is answered before any key check
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(access.allowed_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    if access.api_key is not None:
        middleware.append(Middleware(RequireApiKey, api_key=access.api_key))
    app = App(
        api.metrics,
        routes=[
            Route("/v1/models", api.models, methods=["GET"]),
            Route("/v1/completions", api.completions, methods=["POST"]),
            Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
            Route("/health", api.health, methods=["GET"]),
            Route("/metrics", api.metrics_text, methods=["GET"]),
            Route("/openapi.json", api.openapi, methods=["GET"]),
        ],
        middleware=middleware,
        exception_handlers={
            OpenAIError: _openai_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
    )
    app.state.api = api
    return app


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


class HeaderTimeout(AutoHTTPProtocol):
    """uvicorn's HTTP protocol, closing a connection whose request headers take too long.

    uvicorn closes a keep-alive connection that stays idle, but one byte every few
    seconds is not idle: a client sending its headers slowly (slowloris) would hold a
    connection forever. The clock starts when the connection opens and again after each
    response; a request's complete headers stop it. `header_timeout_s` is set per server
    (`uvicorn_config`).
    """

    header_timeout_s = Limits.header_timeout_s
    _timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_request():
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._in_request():  # a pipelined request may already have started
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _in_request(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        if not self._in_request() and not self.transport.is_closing():
            self.transport.close()


def uvicorn_config(
    app: ASGIApp, limits: Limits, shutdown_grace: float, log_level: str
) -> uvicorn.Config:
    """uvicorn's settings for our app: its header timeout, and time to drain on shutdown."""
    protocol = type(
        "HeaderTimeout", (HeaderTimeout,), {"header_timeout_s": limits.header_timeout_s}
    )
    return uvicorn.Config(
        app,
        http=protocol,
        log_level=log_level,
        lifespan="off",
        timeout_graceful_shutdown=shutdown_grace + 5,
    )


def exposure_warning(host: str, access: Access) -> str | None:
    """What to warn about when the server listens beyond this machine without a key.

    >>> exposure_warning("127.0.0.1", Access()) is None, exposure_warning("::1", Access()) is None
    (True, True)
    >>> exposure_warning("0.0.0.0", Access(api_key="k")) is None
    True
    >>> print(exposure_warning("0.0.0.0", Access()))
    listening on 0.0.0.0 without an API key: anyone who can reach it can generate. Set ...
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback or access.api_key is not None:
        return None
    return (
        f"listening on {host} without an API key: anyone who can reach it can generate. "
        "Set --api-key or LLMSERVE_API_KEY."
    )


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
    limits: Limits | None = None,
    access: Access | None = None,
) -> None:
    """Serve `model` until SIGINT or SIGTERM (what ``llmserve-ref serve`` runs)."""
    limits, access = limits or Limits(), access or Access()
    warning = exposure_warning(host, access)
    if warning:
        print(f"llmserve-ref: WARNING: {warning}", file=sys.stderr, flush=True)
    engine = load_engine(model, engine, engine_config)
    if isinstance(engine, BatchedEngine):
        print(f"llmserve-ref: {kv_cache_report(engine)}", flush=True)
    sock = _bind(host, port)
    config = uvicorn_config(
        create_app(engine, model, limits, access), limits, shutdown_grace, log_level
    )
    announce = f"llmserve-ref: serving {model} at {_url(sock)}/v1"
    try:
        GracefulServer(config, engine, shutdown_grace, announce).run(sockets=[sock])
    finally:
        sock.close()
        engine.close()


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
    limits: Limits | None = None,
    access: Access | None = None,
) -> Iterator[RunningServer]:
    """Run the server on a thread of this process while the ``with`` block runs.

    Port 0 (the default) picks a free port. The engine is a `BatchedEngine` serving
    `model` unless one is passed in; leaving the block shuts the server down gracefully.
    """
    own_engine = engine is None
    engine = load_engine(model) if engine is None else engine
    limits = limits or Limits()
    app = create_app(engine, model, limits, access)
    config = uvicorn_config(app, limits, shutdown_grace, log_level="warning")
    try:
        with run_in_thread(GracefulServer(config, engine, shutdown_grace), host, port) as url:
            yield RunningServer(url, engine, app.state.api.metrics)
    finally:
        if own_engine:
            engine.close()


@contextlib.contextmanager
def run_in_thread(server: uvicorn.Server, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run a uvicorn `server` on a thread of this process while the ``with`` block runs,
    listening on (`host`, `port`); yield its URL. Port 0 picks a free port.

    Leaving the block asks the server to exit and waits for its thread (a
    `GracefulServer` drains its engine first). Any ASGI app runs this way: this
    server in `serve_in_thread`, the fake one of `llmserve_ref.serving.fake_server`.
    """
    sock = _bind(host, port)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server thread stopped before it started serving")
            time.sleep(0.01)
        yield _url(sock)
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
