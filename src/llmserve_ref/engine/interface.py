"""The engine interface: what the HTTP server and an engine hand each other.

The HTTP layer (`llmserve_ref.serving.handlers`) knows nothing about models. It
builds an `EngineRequest` (prompt token ids, sampling parameters, a token limit,
stop strings), calls ``engine.submit(request)`` and reads the returned
`RequestStream`, an async iterator of `TokenEvent`: the text each new token
adds, and on the last event why the sequence ended (a `FinishReason`) and how
long it took. If the client goes away it calls ``engine.cancel(request_id)``. Any
engine with this interface (`Engine`) plugs in: `llmserve_ref.engine.loop_engine.LoopEngine`
steps requests one forward pass each, the batched engine runs one forward pass
for all of them.

Inside an engine, whatever computes tokens reports each as a `TokenOutput` (token
ids only, as vLLM's engine core does); the output processor
(`llmserve_ref.engine.output_processor`) turns those into the events a stream shows.

A stream is fed from the engine's thread and read on the event loop: `deliver`
hands events over with ``loop.call_soon_threadsafe``, one wake-up for many.

>>> import asyncio
>>> async def one_event():
...     stream = RequestStream("r1", asyncio.get_running_loop())
...     deliver([(stream, TokenEvent(" hi", 5, FinishReason.LENGTH))])
...     return [event async for event in stream]
>>> asyncio.run(one_event())
[TokenEvent(text=' hi', token_id=5, finish_reason='length', timings=None, logprobs=None,
            num_cached_tokens=0, times=None)]
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from llmserve_ref.engine.speculative_config import SpeculativeConfig
from llmserve_ref.model.sampling import SamplingParams, TokenLogprobs
from llmserve_ref.model.tokenizer import Tokenizer


class FinishReason(str, enum.Enum):
    """Why a sequence ended, as OpenAI's ``finish_reason`` spells it: a `str`, so it is
    written to JSON, compared and shown as one."""

    STOP = "stop"  # a stop token, or a stop string
    LENGTH = "length"  # max_tokens reached
    ABORT = "abort"  # the client left or the server stopped (vLLM's word)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass
class EngineRequest:
    """One sequence to generate: the prompt's token ids and how to continue it. The one
    request type from the HTTP handler to the engine core, across the process boundary."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ignore_eos: bool = False  # generate max_tokens whatever the model says (benchmarks)
    cache_salt: str | None = None  # requests share cached prefixes only with the same salt
    fork_of: str | None = None  # another sample (OpenAI's n) of this earlier request's prompt


@dataclass(frozen=True, slots=True)
class TokenOutput:
    """One new token of one request, as the engine computed it; `finish_reason` is set on
    its last token (`FinishReason.STOP` for a stop token, `FinishReason.LENGTH`)."""

    request_id: str
    token_id: int
    finish_reason: FinishReason | None = None
    logprobs: TokenLogprobs | None = None  # if the request asked for them
    num_cached_tokens: int | None = None  # on its first token: prompt tokens found cached
    scheduled_at: float | None = None  # on its first token: when it was first scheduled
    num_preemptions: int = 0  # on its last token: how often it was preempted


@dataclass(frozen=True)
class Timings:
    """llama.cpp's timing fields: the prompt's prefill, then the generated tokens."""

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float


@dataclass(frozen=True)
class RequestTimes:
    """When a sequence arrived, was first scheduled, had its first token and ended, on the
    machine's monotonic clock (`time.monotonic`, which every process of it shares), and how
    often it was preempted: what vLLM's per-request latency metrics are made of."""

    arrival: float
    scheduled: float
    first_token: float
    finished: float
    num_preemptions: int = 0


@dataclass(frozen=True)
class TokenEvent:
    """What a stream shows of one token: the text it makes visible ('' if none yet), its
    logprobs if the request asked for them, and on the last event the finish reason, the
    timings, and how many prompt tokens the engine found in its prefix cache (OpenAI's
    and vLLM's ``usage.prompt_tokens_details.cached_tokens``)."""

    text: str
    token_id: int | None
    finish_reason: FinishReason | None = None
    timings: Timings | None = None
    logprobs: TokenLogprobs | None = None
    num_cached_tokens: int = 0
    times: RequestTimes | None = None  # on the last event of a sequence that ran


class EngineUnavailable(RuntimeError):
    """The engine is shutting down and takes no new requests."""


class RequestStream:
    """The async iterator of one request's events; it ends after the event with a finish reason."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self.finished = False
        self.loop = loop
        self._queue: asyncio.Queue[TokenEvent] = asyncio.Queue()

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self.finished:
            raise StopAsyncIteration
        event = await self._queue.get()
        self.finished = event.finish_reason is not None
        return event


def deliver(events: Sequence[tuple[RequestStream, TokenEvent]]) -> None:
    """Hand many streams their events with one wake-up of each event loop.

    Waking an event loop from another thread is a write to its self-pipe and a
    turn of the loop; a batched engine that produces a token for every running
    request each step hands them all over at once.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, TokenEvent]]] = {}
    for stream, event in events:
        by_loop.setdefault(stream.loop, []).append((stream, event))
    for loop, batch in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody listens any more
            loop.call_soon_threadsafe(_put_all, batch)


def _put_all(batch: list[tuple[RequestStream, TokenEvent]]) -> None:
    for stream, event in batch:
        stream._queue.put_nowait(event)


async def merge(streams: Sequence[RequestStream]) -> AsyncIterator[tuple[int, TokenEvent]]:
    """The events of several streams (the ``n`` choices of a request) as they arrive,
    each with the index of its stream."""
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
class SpecDecodingStats:
    """Speculative decoding's counts, with vLLM's names: a draft is one sequence's guesses
    checked in one step, and its accepted tokens the leading guesses the step kept."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: tuple[int, ...] = ()  # by guess position, from 0

    def observe(self, guesses: Sequence[int], emitted: Sequence[int]) -> None:
        """Count one draft: its `guesses`, and the tokens its sequence emitted in the step."""
        # (not len(emitted) - 1: a stop token may end `emitted` on an accepted guess)
        pairs = zip(guesses, emitted, strict=False)
        accepted = sum(1 for _ in itertools.takewhile(lambda pair: pair[0] == pair[1], pairs))
        self.num_drafts += 1
        self.num_draft_tokens += len(guesses)
        self.num_accepted_tokens += accepted
        per_pos = list(self.num_accepted_tokens_per_pos)
        per_pos += [0] * (len(guesses) - len(per_pos))
        self.num_accepted_tokens_per_pos = tuple(
            n + (position < accepted) for position, n in enumerate(per_pos)
        )


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
    step_tokens: Mapping[int, int] = field(default_factory=dict)  # steps, by their tokens
    spec_decoding: SpecDecodingStats = field(default_factory=lambda: SpecDecodingStats())


class Engine(Protocol):
    """What the HTTP layer needs from an engine."""

    tokenizer: Tokenizer
    max_model_len: int
    speculative_config: SpeculativeConfig | None  # how it guesses tokens; None: it does not

    @property
    def cache_config(self) -> Mapping[str, object]:
        """vLLM's CacheConfig fields this engine has (its ``cache_config_info`` labels)."""
        ...

    def submit(self, request: EngineRequest) -> RequestStream: ...
    def cancel(self, request_id: str) -> None: ...
    def drain(self, grace_s: float) -> None: ...
    def close(self) -> None: ...
    def stats(self) -> EngineStats: ...
