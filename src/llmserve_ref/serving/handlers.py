"""The OpenAI route handlers: admit a request, then answer it, whole or streamed.

A generating request goes through two steps, each one method here:

1. **admit**: read the body within the server's limits, validate it
   (`llmserve_ref.serving.openai_parsing`), check what it asks for against the limits
   (`llmserve_ref.serving.limits`), tokenize the prompt on a worker thread, build its
   ``n`` engine requests and submit them all (or none: 429 when the queue is full);
2. **respond**: read the engine's events for every choice as they come, and answer with
   one JSON object, or stream them as server-sent events (`llmserve_ref.serving.streams`),
   each chunk shaped by the request's own class (a chat ``delta``, a completion ``text``).

The handlers never run the model: the engine does, on its own thread or process, and the
event loop stays free to accept connections and write bytes while tokens are computed.
Whatever happens to a request (it finished, its client left, one of its choices failed),
`release` gives back every sequence it holds, once.

>>> from llmserve_ref.engine.interface import Timings, TokenEvent
>>> from llmserve_ref.serving.openai_requests import CompletionRequest
>>> body = CompletionRequest(model="tiny", prompt="Once", n=2)
>>> progress = RequestProgress(body, n=2, prompt_n=3)
>>> progress.record(0, TokenEvent(" upon", 5, "length", Timings(3, 4.0, 1, 0.0)))
>>> progress.texts, progress.done
([' upon', ''], False)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from llmserve_ref.engine.interface import (
    Engine,
    EngineRequest,
    EngineUnavailable,
    FinishReason,
    RequestStream,
    Timings,
    TokenEvent,
    merge,
)
from llmserve_ref.model.sampling import TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.serving.chat_requests import ChatCompletionRequest
from llmserve_ref.serving.errors import OpenAIError
from llmserve_ref.serving.limits import Limits, check_prompt_chars
from llmserve_ref.serving.metrics import ServerMetrics
from llmserve_ref.serving.openai_parsing import check_model, parse, read_body
from llmserve_ref.serving.openai_requests import CompletionRequest, OpenAIRequest
from llmserve_ref.serving.openai_responses import (
    ResponseHead,
    completion_object,
    timings,
    usage,
)
from llmserve_ref.serving.openapi import openapi_document
from llmserve_ref.serving.streams import EventStream, disconnected


@dataclass
class RequestProgress:
    """One request's choices as they come: text, tokens, logprobs, endings and timings."""

    body: OpenAIRequest
    n: int
    prompt_n: int
    echo: str = ""  # the text every choice starts with (a completion's ``echo``)
    texts: list[str] = field(init=False)
    tokens: list[int] = field(init=False)
    finish_reasons: list[FinishReason | None] = field(init=False)

    def __post_init__(self) -> None:
        self.texts = [self.echo] * self.n
        self.tokens = [0] * self.n
        self.finish_reasons = [None] * self.n
        self.logprobs: list[list[tuple[int, TokenLogprobs]]] = [[] for _ in range(self.n)]
        self.logprobs_sent = [0] * self.n  # how many of each choice's are in a response
        self.text_offsets = [len(self.echo)] * self.n  # where the next unsent token starts
        self.timings: list[Timings] = []
        self.num_cached_tokens = 0  # of the prompt all choices share

    def record(self, i: int, event: TokenEvent) -> None:
        self.texts[i] += event.text
        if event.token_id is not None:
            self.tokens[i] += 1
            if event.logprobs is not None:
                self.logprobs[i].append((event.token_id, event.logprobs))
        if event.finish_reason is not None:
            self.finish_reasons[i] = event.finish_reason
            if event.timings is not None:
                self.timings.append(event.timings)
            self.num_cached_tokens = max(self.num_cached_tokens, event.num_cached_tokens)

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.finish_reasons)

    def logprobs_json(self, i: int, tokenizer: Tokenizer) -> dict | None:
        """The logprobs of choice `i`'s tokens not yet sent, in the endpoint's shape (None
        if there are none), now counted as sent."""
        tokens = self.logprobs[i][self.logprobs_sent[i] :]
        if not tokens:
            return None
        self.logprobs_sent[i] = len(self.logprobs[i])
        body, self.text_offsets[i] = self.body.logprobs_json(
            tokens, tokenizer, self.text_offsets[i]
        )
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


class OpenAIServer:
    """The route handlers, around one engine serving one model."""

    def __init__(self, engine: Engine, model: str, limits: Limits) -> None:
        self.engine, self.model, self.limits = engine, model, limits
        self.metrics = ServerMetrics(engine, model)
        self.created = int(time.time())
        self.in_flight: set[str] = set()  # request ids submitted and not yet released

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
        return await self.generate(request, CompletionRequest)

    async def chat_completions(self, request: Request) -> Response:
        return await self.generate(request, ChatCompletionRequest)

    async def generate(self, request: Request, schema: type[OpenAIRequest]) -> Response:
        """Admit the request, then answer it whole or streamed."""
        arrival = time.monotonic()
        body, prompt_ids, streams = await self.admit(request, schema)
        tokenizer = self.engine.tokenizer
        echo = body.echo_text(prompt_ids, tokenizer)
        progress = RequestProgress(body, len(streams), len(prompt_ids), echo)
        head = ResponseHead(
            f"{body.id_prefix}-{uuid.uuid4().hex[:24]}", int(time.time()), self.model
        )
        events = self.cancel_when_closed(self.events(streams, progress, arrival), streams)
        if body.stream:
            return EventStream(self.stream(head, progress, events), lambda: self.release(streams))
        if not await self.collect_unless_gone(request, events):
            return Response(status_code=499)  # nginx's "client closed request": nobody reads it
        choices = [
            body.choice(i, progress.texts[i], progress.finish_reasons[i],
                        progress.logprobs_json(i, tokenizer))
            for i in range(len(streams))
        ]  # fmt: skip
        response = completion_object(
            body.object_name, head, choices=choices, usage=progress.usage(),
            timings=progress.timings_json(),
        )  # fmt: skip
        return JSONResponse(response)

    async def admit(
        self, request: Request, schema: type[OpenAIRequest]
    ) -> tuple[OpenAIRequest, list[int], list[RequestStream]]:
        """Validate, tokenize, build and submit: the request, its prompt and its streams."""
        body = parse(await read_body(request, self.limits), schema)
        check_model(body.model, self.model)
        self.limits.check_stop(body.stop_strings())
        tokenizer, max_model_len = self.engine.tokenizer, self.engine.max_model_len
        check_prompt_chars(
            body.prompt_chars(), max_model_len, tokenizer.max_token_chars, body.prompt_field
        )
        # Tokenizing takes time in proportion to the prompt: on a worker thread, the event
        # loop goes on writing every other client's tokens meanwhile.
        prompt_ids = await asyncio.to_thread(body.encode_prompt, tokenizer)
        requests = body.engine_requests(prompt_ids, max_model_len, tokenizer.vocab_size)
        streams = self.submit(requests)
        self.metrics.admitted(len(prompt_ids), len(requests), requests[0].max_tokens)
        return body, prompt_ids, streams

    async def events(
        self, streams: list[RequestStream], progress: RequestProgress, arrival: float
    ) -> AsyncGenerator[tuple[int, TokenEvent], None]:
        """Every choice's events as they come, recorded in `progress` and in the metrics."""
        last_token_at: list[float | None] = [None] * len(streams)
        async for i, event in merge(streams):
            now = time.monotonic()
            if event.token_id is not None:
                last = last_token_at[i]
                gap = self.metrics.ttft if last is None else self.metrics.itl
                gap.observe(now - (arrival if last is None else last))
                last_token_at[i] = now
                self.metrics.generation_tokens.inc()
            progress.record(i, event)
            if event.finish_reason is not None:
                tokens, cached = progress.tokens[i], event.num_cached_tokens
                self.metrics.finished(
                    event.finish_reason, event.times, progress.prompt_n, tokens, cached
                )
                if progress.done:
                    self.metrics.request_finished(progress.tokens)
            yield i, event

    # --8<-- [start:stream]
    async def stream(
        self,
        head: ResponseHead,
        progress: RequestProgress,
        events: AsyncIterator[tuple[int, TokenEvent]],
    ) -> AsyncGenerator[dict | str, None]:
        """The SSE body: the opening chunk (chat: the role), text deltas, a finish chunk per
        choice, the usage chunk if asked for, ``[DONE]``. Timings ride on the last chunk."""
        body, tokenizer = progress.body, self.engine.tokenizer
        extra = {"usage": None} if body.include_usage else {}

        def chunk(choices: list[dict], **more: object) -> dict:
            return completion_object(body.chunk_object_name, head, choices=choices,
                                     **{**extra, **more})  # fmt: skip

        if opening := body.opening(progress.n, progress.echo):
            yield chunk(opening)
        async for i, event in events:
            # A token's logprobs ride on the next chunk that carries text (a token that
            # shows none yet, half a character or a maybe-stop string, waits for it).
            if event.text:
                logprobs = progress.logprobs_json(i, tokenizer)
                yield chunk([body.delta(i, event.text, None, logprobs)])
            if event.finish_reason is not None:
                last = progress.done and not body.include_usage
                more = {"timings": progress.timings_json()} if last else {}
                logprobs = progress.logprobs_json(i, tokenizer)
                yield chunk([body.delta(i, None, event.finish_reason, logprobs)], **more)
        if body.include_usage:
            yield chunk([], usage=progress.usage(), timings=progress.timings_json())
        yield "[DONE]"

    async def cancel_when_closed(
        self, events: AsyncIterator[tuple[int, TokenEvent]], streams: list[RequestStream]
    ) -> AsyncGenerator[tuple[int, TokenEvent], None]:
        """Pass `events` on; if they stop early (the client left), cancel what is unfinished."""
        try:
            async for event in events:
                yield event
        finally:
            self.release(streams)

    # --8<-- [end:stream]

    # --8<-- [start:admission]
    async def collect_unless_gone(
        self, request: Request, events: AsyncIterator[tuple[int, TokenEvent]]
    ) -> bool:
        """Read every event, unless the client disconnects first: then stop (which cancels
        the request's sequences) and return False."""

        async def collect() -> None:
            async for _ in events:
                pass

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
                    self.metrics.success.inc(finished_reason=FinishReason.ABORT.value)

    # --8<-- [end:admission]
