"""The serving engine: continuous batching on paged KV, behind the `Engine` interface.

Two halves, as in vLLM. The **engine core** (`llmserve_ref.engine.engine_core`) runs
in a process of its own (`llmserve_ref.engine.core_worker`): it schedules, runs one
forward pass over every scheduled token of every running sequence, samples, and sends
back the token ids of the step. `BatchedEngine` is the other half, in the server's
process: it sends the core each request (its prompt already token ids) and each
cancellation, and a reader thread turns the token ids that come back into what the
HTTP layer streams:

1. detokenize each new token and check the request's stop strings; a stop string
   ends the request and tells the core to drop it, which frees its KV blocks;
2. hand every stream its events of the step with one wake-up of the event loop.

The event loop never runs the model, and the core never touches a socket or a string.

Its knobs carry vLLM's names (`EngineConfig`), and `llmserve-ref serve` takes them as
the same flags: ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``,
``--[no-]enable-prefix-caching``, ``--max-model-len`` and ``--kv-cache-memory-bytes``.

>>> import asyncio
>>> from llmserve_ref.model.sampling import SamplingParams
>>> engine = BatchedEngine.load("tiny", device="cpu")  # the core in its own process
>>> engine.num_blocks  # 64 MiB of float32 KV for the tiny model, 16 tokens a block
2048
>>> async def complete(prompt: str) -> str:
...     ids = engine.tokenizer.encode(prompt, add_bos=True)
...     request = EngineRequest(ids, SamplingParams(temperature=0), max_tokens=8)
...     return "".join([event.text async for event in engine.submit(request)])
>>> asyncio.run(complete("Once upon a time,"))
' there was a proud owl named Ava.'
>>> engine.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from llmserve_ref.device import get_device
from llmserve_ref.engine.core_worker import AddRequest, CoreSpec, CoreWorker, start_core
from llmserve_ref.engine.engine_core import TokenOutput
from llmserve_ref.engine.interface import (
    EngineRequest,
    EngineStats,
    EngineUnavailable,
    RequestStream,
    Timings,
    TokenEvent,
    deliver,
)
from llmserve_ref.engine.kv_storage import num_blocks_for
from llmserve_ref.engine.scheduler import SchedulerConfig
from llmserve_ref.model.detokenizer import TextStream
from llmserve_ref.model.generate import check_prompt
from llmserve_ref.model.llama import Llama, ModelConfig
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import MODEL_DIRS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    """The serving knobs, named and meaning what they mean in vLLM."""

    max_num_seqs: int = 256  # sequences running at once
    max_num_batched_tokens: int = 2048  # tokens in one forward pass (the token budget)
    block_size: int = 16  # tokens per KV block
    enable_prefix_caching: bool = True  # on by default, as in vLLM V1
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    kv_cache_memory_bytes: int = 64 * 2**20  # KV memory; vLLM's CPU backend: VLLM_CPU_KVCACHE_SPACE

    def scheduler_config(self, num_blocks: int) -> SchedulerConfig:
        return SchedulerConfig(
            token_budget=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
            num_blocks=num_blocks,
            enable_prefix_caching=self.enable_prefix_caching,
        )


@dataclass(eq=False)
class _Stream:
    """What the API side keeps per request to turn its tokens into events."""

    request: EngineRequest
    stream: RequestStream
    text: TextStream
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    num_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens the core found cached, told with the first token


class BatchedEngine:
    """The API side of a continuously batched engine whose core runs elsewhere."""

    def __init__(
        self,
        model_dir: str | Path,
        tokenizer: Tokenizer,
        config: EngineConfig | None = None,
        device: torch.device | str | None = None,
        model: Llama | None = None,
        num_threads: int | None = None,
    ) -> None:
        """Start the core: in its own process, loading `model_dir` on `device` there, or,
        given an already loaded `model`, on a thread of this process."""
        self.tokenizer = tokenizer
        self.config = config = config or EngineConfig()
        model_config = ModelConfig.from_hf_dict(
            json.loads((Path(model_dir) / "config.json").read_text())
        )
        limit = model_config.max_position_embeddings
        self.max_model_len = min(config.max_model_len or limit, limit)
        dtype = model.lm_head.weight.dtype if model is not None else torch.float32
        self.num_blocks = num_blocks_for(
            config.kv_cache_memory_bytes, model_config, config.block_size, dtype
        )
        self.bytes_per_block = config.block_size * model_config.kv_bytes_per_token(dtype)
        self.vocab_size = model_config.vocab_size
        self.scheduler_config = config.scheduler_config(self.num_blocks)
        device = str(model.device if model is not None else device or get_device())
        spec = CoreSpec(
            str(model_dir),
            device,
            self.scheduler_config,
            self.max_model_len,
            frozenset(tokenizer.backend.get_added_tokens_decoder()),  # <|eos|>, the markers
            num_threads,
        )
        self._streams: dict[str, _Stream] = {}
        self._outgoing: list[AddRequest] = []  # submitted in this turn of the event loop
        self._lock = threading.Lock()  # the event loop, the reader and a drain timer share them
        self._accepting = True
        self._core: CoreWorker = start_core(spec, model)
        kind, self._stats = self._core.receive()
        if kind != "ready":
            raise RuntimeError(f"the engine core did not start: {kind}")
        self._reader = threading.Thread(target=self._read, name="llmserve-engine-reader")
        self._reader.daemon = True
        self._reader.start()

    @classmethod
    def load(
        cls,
        name: str = "tiny",
        device: torch.device | str | None = None,
        config: EngineConfig | None = None,
        separate_process: bool = True,
        num_threads: int | None = None,
    ) -> BatchedEngine:
        """An engine serving the packaged model `name` (its core in a process of its own,
        unless `separate_process` is False)."""
        if name not in MODEL_DIRS:
            raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_DIRS)}")
        model_dir = MODEL_DIRS[name]
        model = None if separate_process else Llama.from_pretrained(model_dir, device)
        tokenizer = Tokenizer.from_file(model_dir)
        return cls(model_dir, tokenizer, config, device, model, num_threads)

    # --8<-- [start:submit]
    def submit(self, request: EngineRequest) -> RequestStream:
        """Send `request` to the core; call from the event loop that will read the stream."""
        r = request
        check_prompt(r.prompt_ids, r.max_tokens, self.max_model_len, self.vocab_size)
        # Checked here too, not only in the core: the caller hears of it, and the core keeps going.
        self.scheduler_config.check_fits(r.request_id, len(r.prompt_ids), r.max_tokens)
        stream = RequestStream(request.request_id, asyncio.get_running_loop())
        with self._lock:
            if not self._accepting:
                raise EngineUnavailable("the server is shutting down")
            text = TextStream(self.tokenizer, request.stop)
            self._streams[request.request_id] = _Stream(request, stream, text)
            add = AddRequest(
                r.request_id, r.prompt_ids, r.params, r.max_tokens, r.ignore_eos,
                r.cache_salt, r.fork_of,
            )  # fmt: skip
            # What is submitted in one turn of the event loop (the n samples of a request)
            # reaches the core in one message, so it can share their prompt.
            if not self._outgoing:
                stream._loop.call_soon(self._send_adds)
            self._outgoing.append(add)
        return stream

    def _send_adds(self) -> None:
        with self._lock:
            adds, self._outgoing = self._outgoing, []
            if adds:
                self._core.send("add", adds)

    def cancel(self, request_id: str) -> None:
        """Stop generating for `request_id`: the core drops it, and frees its blocks, at once."""
        with self._lock:
            if self._streams.pop(request_id, None) is not None:
                self._outgoing = [a for a in self._outgoing if a.request_id != request_id]
                self._core.send("abort", request_id)

    # --8<-- [end:submit]

    def drain(self, grace_s: float) -> None:
        """Take no new requests; end the ones left after `grace_s` seconds with ``"abort"``."""
        with self._lock:
            self._accepting = False
        if grace_s <= 0:
            self._abort_all()
        else:
            timer = threading.Timer(grace_s, self._abort_all)
            timer.daemon = True
            timer.start()

    def close(self) -> None:
        """Abort what is left and stop the core and the reader."""
        self.drain(0.0)
        self._core.close()
        self._reader.join(timeout=30)

    def _abort_all(self) -> None:
        with self._lock:
            events = [self._end(r, s.text.flush(), "abort") for r, s in list(self._streams.items())]
        deliver(events)

    def _read(self) -> None:
        """The reader thread: the core's messages in, stream events out."""
        while True:
            try:
                message = self._core.receive()
            except (EOFError, OSError):  # the core has gone: nothing more will come
                with self._lock:
                    self._accepting, gone = False, bool(self._streams)
                if gone:
                    log.error("the engine core stopped; ending the requests it had")
                self._abort_all()
                return
            kind = message[0]
            if kind == "closed":  # its last counts: what it held once everything was dropped
                self._stats = message[1]
                return
            if kind == "failed":  # the core dropped these requests
                _, request_ids, error = message
                log.error("the engine core failed %d requests: %s", len(request_ids), error)
                with self._lock:
                    ended = [self._streams[r] for r in request_ids if r in self._streams]
                    events = [
                        self._end(s.request.request_id, s.text.flush(), "abort") for s in ended
                    ]
                deliver(events)
                continue
            _, outputs, self._stats = message
            with self._lock:
                events = [e for output in outputs for e in self._emit(output)]
            deliver(events)  # every stream's events of this step: one wake-up

    def _emit(self, output: TokenOutput) -> list[tuple[RequestStream, TokenEvent]]:
        """One new token of one request: its text, and the end if it ended."""
        s = self._streams.get(output.request_id)
        if s is None:
            return []  # cancelled while the core was stepping
        s.num_tokens += 1
        s.first_token = s.first_token or time.perf_counter()
        if output.num_cached_tokens is not None:
            s.num_cached_tokens = output.num_cached_tokens
        if output.finish_reason == "stop":  # a stop token: it shows no text
            return [self._end(output.request_id, s.text.flush(), "stop", output)]
        text = s.text.step(output.token_id)
        if s.text.stopped:  # a stop string: end it here, and drop it in the core
            self._core.send("abort", output.request_id)
            return [self._end(output.request_id, text, "stop", output)]
        if output.finish_reason == "length":
            flushed = text + s.text.flush()
            return [self._end(output.request_id, flushed, "length", output)]
        return [(s.stream, TokenEvent(text, output.token_id, logprobs=output.logprobs))]

    def _end(
        self, request_id: str, text: str, reason: str, last: TokenOutput | None = None
    ) -> tuple[RequestStream, TokenEvent]:
        """The last event of a request, with its `last` token if one ended it (the caller
        holds the lock); it is forgotten here."""
        s = self._streams.pop(request_id)
        if reason == "abort":
            with contextlib.suppress(OSError):  # a core that has gone needs no telling
                self._core.send("abort", request_id)
        now = time.perf_counter()
        first = s.first_token or now
        timings = Timings(
            len(s.request.prompt_ids), (first - s.submitted) * 1e3, s.num_tokens,
            (now - first) * 1e3,
        )  # fmt: skip
        cached = s.num_cached_tokens
        if last is None:
            return s.stream, TokenEvent(text, None, reason, timings, num_cached_tokens=cached)
        return s.stream, TokenEvent(text, last.token_id, reason, timings, last.logprobs, cached)

    def stats(self) -> EngineStats:
        """The core's counts as of its last message."""
        return self._stats

    @property
    def steps(self) -> int:
        return self._stats.steps

    @property
    def num_running(self) -> int:
        return self._stats.running

    @property
    def num_waiting(self) -> int:
        return self._stats.waiting

    @property
    def kv_cache_bytes(self) -> int:
        """Bytes of the KV blocks sequences hold (cached, unheld blocks are free memory)."""
        return self._stats.kv_cache_bytes
