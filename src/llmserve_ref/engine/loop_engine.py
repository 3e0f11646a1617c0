"""The first engine: one worker thread steps every request, one forward pass each.

One worker thread owns the model and runs a loop; each turn of the loop runs one
forward pass for *every* active sequence, a prefill for a new one and a decode step
for the rest, so concurrent requests advance together, a token each per turn,
instead of queueing behind one another. Each sequence has its own KV cache (the
model batches only sequences of equal length, so they are stepped in turn) and its
own seeded `torch.Generator`, so a seed gives the same text however many other
requests share the engine. The asyncio event loop never runs the model: the worker
hands events over with ``loop.call_soon_threadsafe``.

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
>>> engine.num_running, engine.kv_cache_bytes
(0, 0)
>>> engine.close()
"""

from __future__ import annotations

import asyncio
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
    RequestStream,
    Timings,
    TokenEvent,
)
from llmserve_ref.model.detokenizer import TextStream
from llmserve_ref.model.generate import check_prompt
from llmserve_ref.model.kv_cache import KVCache
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import TokenLogprobs, next_token, token_logprobs
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import MODEL_DIRS, load

log = logging.getLogger(__name__)


@dataclass
class _Sequence:
    """A request inside the engine: its stream, cache, generator and progress."""

    request: EngineRequest
    stream: RequestStream
    text: TextStream
    generator: torch.Generator | None
    cache: KVCache | None = None
    output: list[int] = field(default_factory=list)
    prompt_ms: float = 0.0
    decode_start: float = 0.0
    done: bool = False


class LoopEngine:
    """One worker thread steps every active sequence in turn, one token each per loop."""

    def __init__(self, model: Llama, tokenizer: Tokenizer, max_running: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_model_len = model.config.max_position_embeddings
        self.max_running = max_running
        self.steps = 0  # forward passes run, over all sequences
        self.scheduled_tokens = 0  # tokens those passes computed
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
        sequence = _Sequence(request, stream, TextStream(self.tokenizer, request.stop), generator)
        with self._wakeup:
            if not self._accepting:
                raise EngineUnavailable("the server is shutting down")
            self._waiting.append(sequence)
            self._wakeup.notify()
        return stream

    def cancel(self, request_id: str) -> None:
        """Stop generating for `request_id` and free its cache (before the next step)."""
        with self._wakeup:
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

    @property
    def num_running(self) -> int:
        """Sequences being stepped (each holds a KV cache once prefilled)."""
        with self._lock:
            return sum(not s.done for s in self._running)

    @property
    def num_waiting(self) -> int:
        """Sequences queued until a running one finishes (beyond `max_running`)."""
        with self._lock:
            return len(self._waiting)

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of KV cache held by running sequences."""
        with self._lock:
            return sum(s.cache.nbytes for s in self._running if s.cache is not None)

    def stats(self) -> EngineStats:
        return EngineStats(
            self.num_running,
            self.num_waiting,
            self.kv_cache_bytes,
            steps=self.steps,
            scheduled_tokens=self.scheduled_tokens,
        )

    def _loop(self) -> None:
        with torch.inference_mode():
            while (batch := self._next_batch()) is not None:
                for sequence in batch:
                    try:
                        self._step(sequence)
                    except Exception:
                        log.exception("request %s failed", sequence.request.request_id)
                        self._finish(sequence, "", "abort")
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
                elif self._abort_at is not None and time.monotonic() >= self._abort_at:
                    self._finish(sequence, sequence.text.flush(), "abort")
            self._cancelled.clear()
            self._running = [s for s in self._running if not s.done]
            self._waiting = deque(s for s in self._waiting if not s.done)
            while self._waiting and len(self._running) < self.max_running:
                self._running.append(self._waiting.popleft())
            return list(self._running)

    def _step(self, s: _Sequence) -> None:
        """One forward pass for `s` (its prefill, or one decode step), then one token."""
        device = self.model.device
        start = time.perf_counter()
        if s.cache is None:
            prompt_len = len(s.request.prompt_ids)
            # The last token is sampled but never fed back, so it needs no position.
            s.cache = self.model.make_cache(1, prompt_len + s.request.max_tokens - 1)
            ids = torch.tensor([s.request.prompt_ids], device=device)
        else:
            ids = torch.tensor([s.output[-1:]], device=device)
        logits = self.model(ids, s.cache)[:, -1].float()
        self.steps += 1
        self.scheduled_tokens += ids.shape[1]
        token = self._sample(s, logits)
        num_top = s.request.params.logprobs
        lp = None if num_top is None else token_logprobs(logits, [token], [num_top])[0]
        if not s.output:
            s.prompt_ms = (time.perf_counter() - start) * 1e3
            s.decode_start = time.perf_counter()
        s.output.append(token)
        if token in self._stop_ids and not s.request.ignore_eos:
            self._finish(s, s.text.flush(), "stop", lp)
            return
        text = s.text.step(token)
        if s.text.stopped:
            self._finish(s, text, "stop", lp)
        elif len(s.output) == s.request.max_tokens:
            self._finish(s, text + s.text.flush(), "length", lp)
        else:
            s.stream.put(TokenEvent(text, token, logprobs=lp))

    def _sample(self, s: _Sequence, logits: torch.Tensor) -> int:
        stops = () if s.request.ignore_eos else self._stop_ids
        r = s.request
        return next_token(logits, r.params, r.prompt_ids, s.output, s.generator, stops)

    def _finish(
        self, s: _Sequence, text: str, reason: str, logprobs: TokenLogprobs | None = None
    ) -> None:
        """Send the last event (with its token's `logprobs`, if asked for) and mark `s`
        finished; its cache is dropped with it."""
        decode_ms = (time.perf_counter() - s.decode_start) * 1e3 if s.output else 0.0
        timings = Timings(len(s.request.prompt_ids), s.prompt_ms, len(s.output), decode_ms)
        token = s.output[-1] if s.output else None
        s.done, s.cache = True, None  # before the reader can see the last event
        s.stream.put(TokenEvent(text, token, reason, timings, logprobs))
