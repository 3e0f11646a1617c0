"""The serving engine: continuous batching on paged KV, behind the `Engine` interface.

Two halves, as in vLLM. The **engine core** (`llmserve_ref.engine.engine_core`) runs
in a process of its own (`llmserve_ref.engine.core_worker`): it schedules, runs one
forward pass over every scheduled token of every running sequence, samples, and sends
back the token ids of the step. `BatchedEngine` is the other half, in the server's
process: it sends the core each request (its prompt already token ids) and each
cancellation, and a reader thread turns the token ids that come back into what the
HTTP layer streams:

1. the output processor (`llmserve_ref.engine.output_processor`) detokenizes each new
   token and checks the request's stop strings; a stop string ends the request, and
   the core is told to drop it, which frees its KV blocks;
2. every stream gets its events of the step with one wake-up of the event loop.

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
import collections
import contextlib
import dataclasses
import json
import logging
import threading
from pathlib import Path

import torch

from llmserve_ref.device import get_device
from llmserve_ref.engine.core_worker import (
    Abort,
    AddRequests,
    Closed,
    CoreSpec,
    CoreWorker,
    Failed,
    Ready,
    StepDone,
    start_core,
)
from llmserve_ref.engine.engine_config import EngineConfig
from llmserve_ref.engine.interface import (
    EngineRequest,
    EngineStats,
    EngineUnavailable,
    RequestStream,
    deliver,
)
from llmserve_ref.engine.kv_storage import num_blocks_for
from llmserve_ref.engine.output_processor import OutputProcessor
from llmserve_ref.model.generate import check_prompt
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.model.tokenizer import Tokenizer
from llmserve_ref.model.weights import MODEL_DIRS

log = logging.getLogger(__name__)


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
        dtype = model.dtype if model is not None else torch.float32
        guess = config.speculative_config  # a draft's KV shares the blocks and the memory
        draft = guess.draft_config() if guess is not None else None
        self.num_blocks = num_blocks_for(
            config.kv_cache_memory_bytes, model_config, config.block_size, dtype, draft
        )
        self.bytes_per_block = config.block_size * sum(
            c.kv_bytes_per_token(dtype) for c in (model_config, draft) if c
        )
        kv_tokens = self.num_blocks * config.block_size
        self.cache_config = {  # as vLLM's cache_config_info names them
            "block_size": config.block_size,
            "enable_prefix_caching": config.enable_prefix_caching,
            "prefix_caching_hash_algo": "sha256",
            "kv_cache_memory_bytes": config.kv_cache_memory_bytes,
            "num_gpu_blocks": self.num_blocks,  # vLLM's name, whatever the device
            "kv_cache_size_tokens": kv_tokens,
            "kv_cache_max_concurrency": kv_tokens / self.max_model_len,  # full-length requests
        }
        self.vocab_size = model_config.vocab_size
        self.speculative_config = config.speculative_config
        self.scheduler_config = config.scheduler_config(self.num_blocks)
        device = str(model.device if model is not None else device or get_device())
        spec = CoreSpec(
            str(model_dir), device, self.scheduler_config, self.max_model_len,
            frozenset(tokenizer.backend.get_added_tokens_decoder()),  # <|eos|>, the markers
            num_threads, config.speculative_config, config.compile_sizes,
        )  # fmt: skip
        self.processor = OutputProcessor(tokenizer)
        self._outgoing: list[EngineRequest] = []  # submitted in this turn of the event loop
        self._lock = threading.Lock()  # the event loop, the reader and a drain timer share them
        self._accepting = True
        self._step_tokens: collections.Counter[int] = collections.Counter()  # steps by tokens
        self._core: CoreWorker = start_core(spec, model)
        ready = self._core.receive()
        if not isinstance(ready, Ready):
            raise RuntimeError(f"the engine core did not start: {ready!r}")
        self._stats = ready.stats
        self.compile_seconds = ready.compile_seconds  # None: eager
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
        # The pool's size is known here too: the caller hears of a request that cannot fit.
        self.scheduler_config.check_fits(r.request_id, len(r.prompt_ids), r.max_tokens)
        stream = RequestStream(r.request_id, asyncio.get_running_loop())
        with self._lock:
            if not self._accepting:
                raise EngineUnavailable("the server is shutting down")
            self.processor.add_request(r, stream)
            # What is submitted in one turn of the event loop (the n samples of a request)
            # reaches the core in one message, so it can share their prompt.
            if not self._outgoing:
                stream.loop.call_soon(self._send_adds)
            self._outgoing.append(r)
        return stream

    def _send_adds(self) -> None:
        with self._lock:
            adds, self._outgoing = self._outgoing, []
            if adds:
                self._core.send(AddRequests(adds))

    def cancel(self, request_id: str) -> None:
        """Stop generating for `request_id`: the core drops it, and frees its blocks, at once."""
        with self._lock:
            if self.processor.drop(request_id):
                self._outgoing = [r for r in self._outgoing if r.request_id != request_id]
                self._core.send(Abort(request_id))

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
        self._abort(list(self.processor.states))

    def _abort(self, request_ids: list[str]) -> None:
        """End `request_ids` with "abort", and tell the core (if it is still there) to drop them."""
        with self._lock:
            events = self.processor.abort(request_ids)
            for stream, _ in events:
                with contextlib.suppress(OSError):  # a core that has gone needs no telling
                    self._core.send(Abort(stream.request_id))
        deliver(events)

    def _read(self) -> None:
        """The reader thread: the core's messages in, stream events out."""
        while True:
            try:
                message = self._core.receive()
            except (EOFError, OSError):  # the core has gone: nothing more will come
                with self._lock:
                    self._accepting, gone = False, bool(self.processor.states)
                if gone:
                    log.error("the engine core stopped; ending the requests it had")
                self._abort_all()
                return
            match message:
                case StepDone(outputs, stats):
                    with self._lock:
                        if stats.steps > self._stats.steps:  # a step ran, not only messages
                            self._step_tokens[
                                stats.scheduled_tokens - self._stats.scheduled_tokens
                            ] += 1
                        self._stats = stats
                        events, stopped = self.processor.process(outputs)
                        for request_id in stopped:  # a stop string: the core drops it
                            self._core.send(Abort(request_id))
                    deliver(events)  # every stream's events of this step: one wake-up
                case Failed(request_ids, error):
                    log.error("the engine core failed %d requests: %s", len(request_ids), error)
                    self._abort(list(request_ids))
                case Closed(stats):  # its last counts: what it held once everything was dropped
                    self._stats = stats
                    return

    def stats(self) -> EngineStats:
        """The core's counts as of its last message, and the steps it ran by their tokens."""
        with self._lock:
            return dataclasses.replace(self._stats, step_tokens=dict(self._step_tokens))
