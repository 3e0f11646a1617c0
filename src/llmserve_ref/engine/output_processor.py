"""The output processor: token ids in, what each request's stream shows out.

An engine computes token ids. A client reads text, and the rules between the two are
the same whichever engine computed the tokens, so they live here once, as in vLLM
(its ``OutputProcessor`` runs in the API server's process, beside the engine core's
client). Per request the processor keeps a `RequestState`, and for each new
`TokenOutput` it:

1. detokenizes the token (`TextStream`: a split UTF-8 character waits for its last
   byte, text that may be the start of a stop string is held back);
2. ends the request at a stop string, and says so, so that the engine drops it and
   frees its KV blocks (the engine does not know about strings);
3. stamps the times: the first token, the end, llama.cpp's ``timings``;
4. ends the stream with the engine's finish reason (a stop token: ``stop``, no text;
   ``max_tokens``: ``length``) or with ``abort`` when the engine gives up on it.

>>> import asyncio
>>> from llmserve_ref.model.tokenizer import Tokenizer
>>> from llmserve_ref.model.weights import TARGET_DIR
>>> tokenizer = Tokenizer.from_file(TARGET_DIR)
>>> processor = OutputProcessor(tokenizer)
>>> async def story() -> list[TokenEvent]:
...     stream = RequestStream("r1", asyncio.get_running_loop())
...     processor.add_request(EngineRequest([0], max_tokens=8, stop=(" was",), request_id="r1"),
...                           stream)
...     ids = tokenizer.encode(" there was a fox")
...     events, stopped = processor.process([TokenOutput("r1", t) for t in ids])
...     return [(e.text, e.finish_reason) for _, e in events], stopped
>>> asyncio.run(story())
([(' there', None), ('', 'stop')], ['r1'])
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from llmserve_ref.engine.interface import (
    EngineRequest,
    FinishReason,
    RequestStream,
    RequestTimes,
    Timings,
    TokenEvent,
    TokenOutput,
)
from llmserve_ref.model.detokenizer import TextStream
from llmserve_ref.model.tokenizer import Tokenizer

Event = tuple[RequestStream, TokenEvent]


@dataclass(eq=False)
class RequestState:
    """What the processor keeps per request to turn its tokens into events."""

    request: EngineRequest
    stream: RequestStream
    text: TextStream
    submitted: float = field(default_factory=time.monotonic)
    scheduled: float | None = None  # when the engine first scheduled it
    first_token: float | None = None
    num_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens the engine found cached, told with the first token


class OutputProcessor:
    """Per-request text, stop strings, times and endings, for any engine.

    Not thread-safe: an engine whose requests arrive on one thread and whose tokens
    come back on another calls it under its own lock.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.states: dict[str, RequestState] = {}

    def add_request(self, request: EngineRequest, stream: RequestStream) -> None:
        """Start following `request`, whose events go to `stream`."""
        text = TextStream(self.tokenizer, request.stop)
        self.states[request.request_id] = RequestState(request, stream, text)

    def drop(self, request_id: str) -> bool:
        """Forget a request nobody reads any more (cancelled); False if it had ended."""
        return self.states.pop(request_id, None) is not None

    def process(self, outputs: Iterable[TokenOutput]) -> tuple[list[Event], list[str]]:
        """The events of `outputs`, and the requests a stop string ended, which the engine
        must drop (it has not finished them itself). Outputs of requests no longer
        followed (cancelled while the engine was stepping) are skipped."""
        events: list[Event] = []
        stopped: list[str] = []
        for output in outputs:
            state = self.states.get(output.request_id)
            if state is None:
                continue
            event = self._token(state, output)
            if state.text.stopped and output.finish_reason is None:
                stopped.append(output.request_id)
            events.append(event)
        return events, stopped

    def abort(self, request_ids: Iterable[str]) -> list[Event]:
        """End each of `request_ids` still followed with ``abort``: what the engine gave up on
        (the server is stopping, or a step failed)."""
        return [
            self._end(self.states[r], self.states[r].text.flush(), FinishReason.ABORT)
            for r in list(request_ids)
            if r in self.states
        ]

    # --8<-- [start:token]
    def _token(self, state: RequestState, output: TokenOutput) -> tuple[RequestStream, TokenEvent]:
        """One new token of one request: its text, and the end if it ended."""
        state.num_tokens += 1
        state.first_token = state.first_token or time.monotonic()
        state.scheduled = state.scheduled or output.scheduled_at
        if output.num_cached_tokens is not None:
            state.num_cached_tokens = output.num_cached_tokens
        if output.finish_reason is FinishReason.STOP:  # a stop token: it shows no text
            return self._end(state, state.text.flush(), FinishReason.STOP, output)
        text = state.text.step(output.token_id)
        if state.text.stopped:  # a stop string: end it here
            return self._end(state, text, FinishReason.STOP, output)
        if output.finish_reason is FinishReason.LENGTH:
            return self._end(state, text + state.text.flush(), FinishReason.LENGTH, output)
        return state.stream, TokenEvent(text, output.token_id, logprobs=output.logprobs)

    # --8<-- [end:token]

    def _end(
        self, state: RequestState, text: str, reason: FinishReason, last: TokenOutput | None = None
    ) -> Event:
        """The last event of a request, with its `last` token if one ended it; the request
        is forgotten here."""
        del self.states[state.request.request_id]
        now = time.monotonic()
        first = state.first_token or now
        timings = Timings(
            len(state.request.prompt_ids),
            (first - state.submitted) * 1e3,
            state.num_tokens,
            (now - first) * 1e3,
        )
        times = None
        if state.first_token is not None:  # it ran
            preemptions = 0 if last is None else last.num_preemptions
            scheduled = state.scheduled or state.submitted
            times = RequestTimes(state.submitted, scheduled, first, now, preemptions)
        token_id, logprobs = (None, None) if last is None else (last.token_id, last.logprobs)
        event = TokenEvent(
            text, token_id, reason, timings, logprobs, state.num_cached_tokens, times
        )
        return state.stream, event
