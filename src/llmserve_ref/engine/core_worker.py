"""The engine core's own loop, in its own process (or thread), fed through a pipe.

A serving process has two kinds of work: the HTTP side (parse requests, turn tokens into
text, write server-sent events) and the model side (schedule, run the forward pass,
sample). Both are Python, and in one process they share one interpreter lock: while the
HTTP side formats events, the next step cannot be prepared, and the other way round. So,
as vLLM does (its API server and its "engine core" are separate processes), the core runs
in a process of its own and the two talk through a pair of pipes:

* to the core: ``("add", [AddRequest, ...])``, ``("abort", request_id)``,
  ``("close", None)``;
* from the core: ``("ready", EngineStats)`` once loaded, then ``("step", outputs, stats)``
  after every step (the token ids it produced, each with its logprobs if its request
  asked) or batch of messages, and
  ``("failed", request_ids, text)`` if a step raised (every request is dropped) or a
  batch of requests was refused (those are); the server ends them with "abort".

`run_core` is that loop. `start_core` runs it in a fresh process, which loads the model
itself, or on a thread of this process with a model already loaded (tests, pages). The
messages are the same either way.

>>> from llmserve_ref.engine.scheduler import SchedulerConfig
>>> from llmserve_ref.model.sampling import SamplingParams
>>> from llmserve_ref.model.weights import TARGET_DIR, load_target
>>> spec = CoreSpec(str(TARGET_DIR), "cpu", SchedulerConfig(max_num_seqs=8, num_blocks=64), 256)
>>> worker = start_core(spec, model=load_target("cpu")[0])  # on a thread
>>> worker.receive()[0]
'ready'
>>> worker.send("add", [AddRequest("r1", [0, 348, 352], SamplingParams(temperature=0), 3)])
>>> tokens = []
>>> while len(tokens) < 3:
...     kind, outputs, stats = worker.receive()
...     tokens += [(o.token_id, o.finish_reason) for o in outputs]
>>> tokens
[(262, None), (353, None), (15, 'length')]
>>> worker.close()
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch

from llmserve_ref.engine.engine_core import EngineCore
from llmserve_ref.engine.interface import EngineStats
from llmserve_ref.engine.scheduler import SchedulerConfig
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.sampling import SamplingParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoreSpec:
    """What the core process needs to build its `EngineCore` (plain data: it is pickled)."""

    model_dir: str
    device: str
    scheduler: SchedulerConfig
    max_model_len: int
    stop_token_ids: Collection[int] = ()
    num_threads: int | None = None  # torch's threads in a core process (default: cores - 1)


@dataclass(frozen=True)
class AddRequest:
    """One request for the core: token ids in, how to sample, how many tokens."""

    request_id: str
    prompt_ids: Sequence[int]
    params: SamplingParams
    max_tokens: int
    ignore_eos: bool = False
    cache_salt: str | None = None
    fork_of: str | None = None


def stats_of(core: EngineCore) -> EngineStats:
    """The core's load and totals, as `/metrics` reports them."""
    scheduler, blocks = core.scheduler, core.scheduler.block_manager
    storage = core.runner.storage
    return EngineStats(
        running=len(scheduler.running),
        waiting=len(scheduler.waiting),
        kv_cache_bytes=blocks.num_used_blocks * storage.nbytes // storage.num_blocks,
        kv_blocks_used=blocks.num_used_blocks,
        kv_blocks_total=blocks.num_blocks,
        prefix_cache_queries=blocks.num_queries,
        prefix_cache_hits=blocks.num_hits,
        preemptions=scheduler.num_preemptions,
        steps=core.num_steps,
        scheduled_tokens=core.num_scheduled_tokens,
    )


def run_core(spec: CoreSpec, inbox: Connection, outbox: Connection, model: Llama | None) -> None:
    """Build the core, then apply messages and step until told to close."""
    if model is None:  # in its own process: load the weights here
        # Leave a core to the server's process: on a small machine, torch's threads and
        # the HTTP side fighting over every core slow both (measured: benchmarks/engine.py).
        torch.set_num_threads(spec.num_threads or max(1, (os.cpu_count() or 2) - 1))
        model = Llama.from_pretrained(spec.model_dir, spec.device)
    elif spec.num_threads:
        torch.set_num_threads(spec.num_threads)
    core = EngineCore(model, spec.scheduler, spec.max_model_len, spec.stop_token_ids)
    outbox.send(("ready", stats_of(core)))
    with torch.inference_mode():
        while True:
            # Idle: sleep until a message comes. Busy: take what has come, then step.
            if not core.has_unfinished_requests():
                inbox.poll(None)
            received = False
            while inbox.poll(0):
                kind, payload = inbox.recv()
                if kind == "close":
                    outbox.send(("closed", stats_of(core)))
                    return
                try:
                    apply(core, kind, payload)
                except ValueError as error:  # the server checked them first: a bug, but
                    log.exception("engine core refused %s", kind)  # only theirs
                    ids = [r.request_id for r in payload]
                    for request_id in ids:
                        core.abort(request_id)
                    outbox.send(("failed", ids, repr(error)))
                received = True
            if not core.has_unfinished_requests():
                if received:  # aborts change what /metrics shows: report it
                    outbox.send(("step", [], stats_of(core)))
                continue
            try:
                outputs = core.step()
            except Exception as error:  # a bug: say so, drop everything, keep serving
                log.exception("engine step failed")
                ids = list(core.sequences)
                for request_id in ids:
                    core.abort(request_id)
                outbox.send(("failed", ids, repr(error)))
                continue
            outbox.send(("step", outputs, stats_of(core)))


def apply(core: EngineCore, kind: str, payload: Any) -> None:
    if kind == "add":  # a batch, in the order submitted: forks after their parent
        for r in payload:
            core.add_request(
                r.request_id,
                r.prompt_ids,
                r.params,
                r.max_tokens,
                ignore_eos=r.ignore_eos,
                cache_salt=r.cache_salt,
                fork_of=r.fork_of,
            )
    elif kind == "abort":
        core.abort(payload)
    else:
        raise ValueError(f"unknown message to the engine core: {kind!r}")


class CoreWorker:
    """The API side's handle on a running core: send messages, receive its replies."""

    def __init__(self, to_core: Connection, from_core: Connection, worker: Any) -> None:
        self._to_core, self._from_core, self.worker = to_core, from_core, worker
        self._sending = threading.Lock()  # several threads send; a pipe takes one at a time

    def send(self, kind: str, payload: Any = None) -> None:
        with self._sending:
            self._to_core.send((kind, payload))

    def receive(self) -> tuple:
        """The core's next message (blocks; EOFError if the core has gone)."""
        return self._from_core.recv()

    def close(self, timeout: float = 30.0) -> None:
        """Ask the core to stop and wait for it (a process that will not stop is killed)."""
        with contextlib.suppress(OSError):  # already gone
            self.send("close")
        self.worker.join(timeout)
        if isinstance(self.worker, multiprocessing.process.BaseProcess) and self.worker.is_alive():
            self.worker.kill()
            self.worker.join()


def start_core(spec: CoreSpec, model: Llama | None = None) -> CoreWorker:
    """Run the core in a new process (which loads the model), or, given `model`, on a thread."""
    core_inbox, to_core = multiprocessing.Pipe(duplex=False)
    from_core, core_outbox = multiprocessing.Pipe(duplex=False)
    args = (spec, core_inbox, core_outbox, model)
    if model is None:
        # "spawn": a fresh interpreter, not a copy of this one with its threads and locks.
        context = multiprocessing.get_context("spawn")
        worker = context.Process(target=run_core, args=args, name="llmserve-engine-core")
    else:
        worker = threading.Thread(target=run_core, args=args, name="llmserve-engine-core")
    worker.daemon = True
    worker.start()
    return CoreWorker(to_core, from_core, worker)
