"""The engine interface: what the HTTP server needs from any engine.

The HTTP layer (`llmserve_ref.serving.server`) knows nothing about models. It
builds an `EngineRequest` (prompt token ids, sampling parameters, a token limit,
stop strings), calls ``engine.submit(request)`` and reads the returned
`RequestStream`, an async iterator of `TokenEvent`: the text each new token
adds, and on the last event why the sequence ended and how long it took. If the
client goes away it calls ``engine.cancel(request_id)``. Any engine with this
interface (`Engine`) plugs in: `llmserve_ref.engine.loop_engine.LoopEngine`
steps requests one forward pass each, the batched engine runs one forward pass
for all of them.

A stream is fed from the engine's thread and read on the event loop: `put`
hands each event over with ``loop.call_soon_threadsafe``.

>>> import asyncio
>>> async def one_event():
...     stream = RequestStream("r1", asyncio.get_running_loop())
...     stream.put(TokenEvent(" hi", 5, "length"))
...     return [event async for event in stream]
>>> asyncio.run(one_event())
[TokenEvent(text=' hi', token_id=5, finish_reason='length', timings=None, logprobs=None,
            num_cached_tokens=0)]
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from llmserve_ref.model.sampling import SamplingParams, TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer


@dataclass
class EngineRequest:
    """One sequence to generate: the prompt's token ids and how to continue it."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ignore_eos: bool = False  # generate max_tokens whatever the model says (benchmarks)
    cache_salt: str | None = None  # requests share cached prefixes only with the same salt
    fork_of: str | None = None  # another sample (OpenAI's n) of this earlier request's prompt


@dataclass(frozen=True)
class Timings:
    """llama.cpp's timing fields: the prompt's prefill, then the generated tokens."""

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token: the text it makes visible ('' if none yet), its logprobs if the
    request asked for them, and on the last event the finish reason (``"stop"``,
    ``"length"`` or ``"abort"``), the timings, and how many prompt tokens the engine found
    in its prefix cache (OpenAI's and vLLM's ``usage.prompt_tokens_details.cached_tokens``)."""

    text: str
    token_id: int | None
    finish_reason: str | None = None
    timings: Timings | None = None
    logprobs: TokenLogprobs | None = None
    num_cached_tokens: int = 0


class EngineUnavailable(RuntimeError):
    """The engine is shutting down and takes no new requests."""


class RequestStream:
    """The async iterator of one request's events; it ends after the event with a finish reason."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self.finished = False
        self._loop = loop
        self._queue: asyncio.Queue[TokenEvent] = asyncio.Queue()

    def put(self, event: TokenEvent) -> None:
        """Hand `event` to the event loop (called from the engine's thread)."""
        deliver([(self, event)])

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self.finished:
            raise StopAsyncIteration
        event = await self._queue.get()
        self.finished = event.finish_reason is not None
        return event


def deliver(events: list[tuple[RequestStream, TokenEvent]]) -> None:
    """Hand many streams their events with one wake-up of each event loop.

    Waking an event loop from another thread is a write to its self-pipe and a
    turn of the loop; a batched engine that produces a token for every running
    request each step hands them all over at once.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, TokenEvent]]] = {}
    for stream, event in events:
        by_loop.setdefault(stream._loop, []).append((stream, event))
    for loop, batch in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            loop.call_soon_threadsafe(_put_all, batch)


def _put_all(batch: list[tuple[RequestStream, TokenEvent]]) -> None:
    for stream, event in batch:
        stream._queue.put_nowait(event)


class Engine(Protocol):
    """What the HTTP layer needs from an engine."""

    tokenizer: Tokenizer
    max_model_len: int

    def submit(self, request: EngineRequest) -> RequestStream: ...
    def cancel(self, request_id: str) -> None: ...
    def drain(self, grace_s: float) -> None: ...
    def close(self) -> None: ...
    def stats(self) -> EngineStats: ...
    @property
    def num_running(self) -> int: ...
    @property
    def num_waiting(self) -> int: ...
    @property
    def kv_cache_bytes(self) -> int: ...


@dataclass(frozen=True)
class EngineStats:
    """What an engine reports to `/metrics`: its load now, and totals since it started."""

    running: int  # sequences being stepped
    waiting: int  # sequences queued for a seat or for KV memory
    kv_cache_bytes: int  # KV memory held by sequences
    kv_blocks_used: int = 0  # paged engines: blocks held (cached free blocks not counted)
    kv_blocks_total: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # ... and found there
    preemptions: int = 0
    steps: int = 0  # forward passes
    scheduled_tokens: int = 0  # tokens computed by those passes
