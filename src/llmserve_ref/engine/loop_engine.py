"""The first engine: one worker thread steps every request, one forward pass each.

One worker thread owns the model and runs a loop; each turn of the loop runs one
forward pass for *every* active sequence, a prefill for a new one and a decode step
for the rest, so concurrent requests advance together, a token each per turn,
instead of queueing behind one another. Each sequence has its own KV cache (the
model batches only sequences of equal length, so they are stepped in turn) and its
own seeded `torch.Generator`, so a seed gives the same text however many other
requests share the engine. The asyncio event loop never runs the model: the worker
hands events over with ``loop.call_soon_threadsafe``. Token ids become text, stop
strings and events in the output processor the batched engine uses too
(`llmserve_ref.engine.output_processor`).

>>> import asyncio
>>> from llmserve_ref.engine.interface import EngineRequest
>>> from llmserve_ref.model.sampling import SamplingParams
>>> engine = LoopEngine.load("tiny", device="cpu")
>>> async def complete(prompt: str) -> tuple[str, str | None]:
...     ids = engine.tokenizer.encode(prompt, add_bos=True)
...     request = EngineRequest(ids, SamplingParams(temperature=0), max_tokens=8)
...     events = [event async for event in engine.submit(request)]
...     return "".join(e.text for e in events), events[-1].finish_reason
>>> asyncio.run(complete("Once upon a time,"))
(' there was a...', 'length')
>>> engine.stats().running, engine.stats().kv_cache_bytes
(0, 0)
>>> engine.close()
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from llmserve_ref.engine.interface import (
    EngineRequest,
    EngineStats,
    EngineUnavailable,
    FinishReason,
    RequestStream,
    TokenOutput,
    deliver,
)
from llmserve_ref.engine.output_processor import OutputProcessor
from llmserve_ref.engine.speculative_config import SpeculativeConfig
from llmserve_ref.model.generate import check_prompt
from llmserve_ref.model.kv_cache import KVCache
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import next_token, token_logprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import MODEL_DIRS, load

log = logging.getLogger(__name__)


@dataclass
class _Sequence:
    """A request inside the engine: its cache, generator and tokens so far."""

    request: EngineRequest
    generator: torch.Generator | None
    cache: KVCache | None = None
    output: list[int] = field(default_factory=list)
    done: bool = False


class LoopEngine:
    """One worker thread steps every active sequence in turn, one token each per loop."""

    def __init__(self, model: Llama, tokenizer: Tokenizer, max_running: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_model_len = model.config.max_position_embeddings
        self.cache_config = {"enable_prefix_caching": False}  # one contiguous cache each
        self.speculative_config: SpeculativeConfig | None = None  # it never guesses
        self.max_running = max_running
        self.steps = 0  # forward passes run, over all sequences
        self.scheduled_tokens = 0  # tokens those passes computed
        self.processor = OutputProcessor(tokenizer)
        self._step_tokens: collections.Counter[int] = collections.Counter()
        self._stop_ids = set(tokenizer.backend.get_added_tokens_decoder())
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._cancelled: set[str] = set()
        self._accepting = True
        self._abort_at: float | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._loop, name="llmserve-engine", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, name: str = "tiny", device: torch.device | str | None = None) -> LoopEngine:
        """An engine serving the packaged model `name` (a key of `MODEL_DIRS`)."""
        if name not in MODEL_DIRS:
            raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_DIRS)}")
        return cls(*load(MODEL_DIRS[name], device))

    def submit(self, request: EngineRequest) -> RequestStream:
        """Queue `request`; call from the event loop that will read the returned stream."""
        vocab_size = self.model.config.vocab_size
        check_prompt(request.prompt_ids, request.max_tokens, self.max_model_len, vocab_size)
        stream = RequestStream(request.request_id, asyncio.get_running_loop())
        generator = None
        if request.params.seed is not None:
            generator = torch.Generator(self.model.device).manual_seed(request.params.seed)
        with self._wakeup:
            if not self._accepting:
                raise EngineUnavailable("the server is shutting down")
            self.processor.add_request(request, stream)
            self._waiting.append(_Sequence(request, generator))
            self._wakeup.notify()
        return stream

    def cancel(self, request_id: str) -> None:
        """Stop generating for `request_id` and free its cache (before the next step)."""
        with self._wakeup:
            self.processor.drop(request_id)  # what it computes meanwhile goes nowhere
            self._cancelled.add(request_id)
            self._wakeup.notify()

    def drain(self, grace_s: float) -> None:
        """Take no new requests; end the ones left after `grace_s` seconds with ``"abort"``."""
        with self._wakeup:
            self._accepting = False
            self._abort_at = time.monotonic() + grace_s
            self._wakeup.notify()

    def close(self) -> None:
        """Abort what is left and stop the worker thread."""
        self.drain(0.0)
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        self._thread.join()

    def stats(self) -> EngineStats:
        """Sequences running and waiting, the bytes of their KV caches, passes run."""
        with self._lock:
            running = [s for s in self._running if not s.done]
            return EngineStats(
                len(running),
                len(self._waiting),
                sum(s.cache.nbytes for s in running if s.cache is not None),
                steps=self.steps,
                scheduled_tokens=self.scheduled_tokens,
                step_tokens=dict(self._step_tokens),
            )

    def _loop(self) -> None:
        with torch.inference_mode():
            while (batch := self._next_batch()) is not None:
                for sequence in batch:
                    request_id = sequence.request.request_id
                    try:
                        output = self._step(sequence)
                    except Exception:
                        log.exception("request %s failed", request_id)
                        with self._lock:
                            events = self.processor.abort([request_id])
                    else:
                        with self._lock:
                            events, _ = self.processor.process([output])
                    with self._lock:
                        if request_id not in self.processor.states:  # it ended, or was cancelled
                            sequence.done, sequence.cache = True, None  # before its last event
                    deliver(events)
                with self._lock:
                    self._running = [s for s in self._running if not s.done]

    def _next_batch(self) -> list[_Sequence] | None:
        """Wait for work; drop cancelled sequences, admit waiting ones. None: shut down."""
        with self._wakeup:
            while not (self._waiting or self._running or self._closed):
                self._wakeup.wait()
            if self._closed and not (self._waiting or self._running):
                return None
            everyone = [*self._running, *self._waiting]
            for sequence in everyone:
                if sequence.request.request_id in self._cancelled:
                    sequence.done = True  # the reader is gone: no last event, free it now
            if self._abort_at is not None and time.monotonic() >= self._abort_at:
                aborting = [s for s in everyone if not s.done]
                deliver(self.processor.abort(s.request.request_id for s in aborting))
                for sequence in aborting:
                    sequence.done, sequence.cache = True, None
            self._cancelled.clear()
            self._running = [s for s in self._running if not s.done]
            self._waiting = deque(s for s in self._waiting if not s.done)
            while self._waiting and len(self._running) < self.max_running:
                self._running.append(self._waiting.popleft())
            return list(self._running)

    def _step(self, s: _Sequence) -> TokenOutput:
        """One forward pass for `s` (its prefill, or one decode step), then one token."""
        device = self.model.device
        request = s.request
        if s.cache is None:
            # The last token is sampled but never fed back, so it needs no position.
            s.cache = self.model.make_cache(1, len(request.prompt_ids) + request.max_tokens - 1)
            ids = torch.tensor([request.prompt_ids], device=device)
        else:
            ids = torch.tensor([s.output[-1:]], device=device)
        logits = self.model(ids, s.cache)[:, -1].float()
        self.steps += 1
        self.scheduled_tokens += ids.shape[1]
        self._step_tokens[ids.shape[1]] += 1
        stops = () if request.ignore_eos else self._stop_ids
        params = request.params
        token = next_token(logits, params, request.prompt_ids, s.output, s.generator, stops)
        num_top = params.logprobs
        lp = None if num_top is None else token_logprobs(logits, [token], [num_top])[0]
        s.output.append(token)
        reason = None
        if token in stops:
            reason = FinishReason.STOP
        elif len(s.output) == request.max_tokens:
            reason = FinishReason.LENGTH
        return TokenOutput(request.request_id, token, reason, lp)
