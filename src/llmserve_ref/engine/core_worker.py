"""The engine core's own loop, in its own process (or thread), fed through a pipe.

A serving process has two kinds of work: the HTTP side (parse requests, turn tokens into
text, write server-sent events) and the model side (schedule, run the forward pass,
sample). Both are Python, and in one process they share one interpreter lock: while the
HTTP side formats events, the next step cannot be prepared, and the other way round. So,
as vLLM does (its API server and its "engine core" are separate processes), the core runs
in a process of its own and the two talk through a pair of pipes, one small class per
kind of message:

* to the core: `AddRequests` (the `EngineRequest` objects as submitted), `Abort`, `Shutdown`;
* from the core: `Ready` once loaded, then `StepDone` after every step (the
  `TokenOutput` of each token it produced) or batch of messages, `Failed` if a step
  raised (every request is dropped) or some requests were refused (those are), which
  the server ends with "abort", and `Closed` with its last counts.

How they travel (pickled by `multiprocessing.connection`) is this module's business; the
two sides only see the classes.

`run_core` is that loop. `start_core` runs it in a fresh process, which loads the model
itself, or on a thread of this process with a model already loaded (tests, pages). The
messages are the same either way.

>>> from llmserve_ref.engine.interface import EngineRequest
>>> from llmserve_ref.engine.scheduler_config import SchedulerConfig
>>> from llmserve_ref.model.sampling import SamplingParams
>>> from llmserve_ref.model.weights import TARGET_DIR, load_target
>>> spec = CoreSpec(str(TARGET_DIR), "cpu", SchedulerConfig(max_num_seqs=8, num_blocks=64), 256)
>>> worker = start_core(spec, model=load_target("cpu")[0])  # on a thread
>>> type(worker.receive()).__name__
'Ready'
>>> worker.send(AddRequests([EngineRequest([0, 348, 352], SamplingParams(temperature=0), 3)]))
>>> tokens = []
>>> while len(tokens) < 3:
...     tokens += [(o.token_id, o.finish_reason) for o in worker.receive().outputs]
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
from llmserve_ref.engine.interface import EngineRequest, EngineStats, TokenOutput
from llmserve_ref.engine.malloc_tuning import keep_freed_memory
from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.speculative_config import SpeculativeConfig
from llmserve_ref.model.llama import Llama

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
    speculative: SpeculativeConfig | None = None  # guesses checked each step, if any
    compile_sizes: Sequence[int] = ()  # decode batch sizes compiled (and any other step)


# To the core.
@dataclass(frozen=True)
class AddRequests:
    """Requests submitted in one turn of the event loop (a request's ``n`` samples come
    together, so the core can share their prompt), in order: forks after their parent."""

    requests: Sequence[EngineRequest]


@dataclass(frozen=True)
class Abort:
    """Drop a request now (its client left, or a stop string ended it) and free its blocks."""

    request_id: str


@dataclass(frozen=True)
class Shutdown:
    """Stop: answer `Closed` and return."""


# From the core.
@dataclass(frozen=True)
class Ready:
    """The model is loaded (and its forward compiled, if asked); the core takes requests."""

    stats: EngineStats
    compile_seconds: float | None = None  # None: every step runs eagerly


@dataclass(frozen=True)
class StepDone:
    """The tokens of one step (none if only messages were applied), and the counts after it."""

    outputs: Sequence[TokenOutput]
    stats: EngineStats


@dataclass(frozen=True)
class Failed:
    """The core dropped these requests: a step raised, or it refused them."""

    request_ids: Sequence[str]
    error: str


@dataclass(frozen=True)
class Closed:
    """The core has stopped; its last counts, once everything was dropped."""

    stats: EngineStats


ToCore = AddRequests | Abort | Shutdown
FromCore = Ready | StepDone | Failed | Closed


def core_threads() -> int:
    """torch's threads in the core's own process: all cores but one, which is left to the
    server's process (on a small machine, torch's threads and the HTTP side fighting over
    every core slow both; measured: benchmarks/engine.py)."""
    return max(1, (os.cpu_count() or 2) - 1)


def run_core(spec: CoreSpec, inbox: Connection, outbox: Connection, model: Llama | None) -> None:
    """Build the core, then apply messages and step until told to shut down."""
    if model is None:  # in its own process: load the weights here
        torch.set_num_threads(spec.num_threads or core_threads())
        keep_freed_memory()  # a prompt step's tensors, without a page fault per page
        model = Llama.from_pretrained(spec.model_dir, spec.device)
    elif spec.num_threads:
        torch.set_num_threads(spec.num_threads)
    guess = spec.speculative  # a draft model loads here too, its KV in the same blocks
    proposer = guess.proposer(spec.max_model_len, spec.scheduler, model.device) if guess else None
    core = EngineCore(
        model, spec.scheduler, spec.max_model_len, spec.stop_token_ids,
        proposer=proposer, max_guesses=guess.num_guesses if guess else None,
        compile_sizes=spec.compile_sizes,
    )  # fmt: skip
    compiled = core.runner.compiled
    outbox.send(Ready(core.stats(), compiled.warm_up() if compiled else None))
    with torch.inference_mode():
        while True:
            if core.idle:  # sleep until a message comes
                inbox.poll(None)
            received = False
            while inbox.poll(0):  # take what has come, then step
                message = inbox.recv()
                if isinstance(message, Shutdown):
                    outbox.send(Closed(core.stats()))
                    return
                apply(core, message, outbox)
                received = True
            if core.idle:
                if received:  # aborts change what /metrics shows: report it
                    outbox.send(StepDone([], core.stats()))
                continue
            outbox.send(step(core))


def apply(core: EngineCore, message: ToCore, outbox: Connection) -> None:
    """Apply one message; requests the core refuses are dropped and reported `Failed`."""
    match message:
        case AddRequests(requests):
            try:
                for request in requests:
                    core.add_request(request)
            except ValueError as error:  # the server checked them first: a bug, but
                log.exception("engine core refused a request")  # only theirs
                ids = [r.request_id for r in requests]
                for request_id in ids:
                    core.abort(request_id)
                outbox.send(Failed(ids, repr(error)))
        case Abort(request_id):
            core.abort(request_id)
        case _:
            raise TypeError(f"unknown message to the engine core: {message!r}")


def step(core: EngineCore) -> StepDone | Failed:
    """One step, or, if it raises (a bug), every request dropped and reported: the core
    keeps serving."""
    try:
        outputs = core.step()
    except Exception as error:
        log.exception("engine step failed")
        ids = core.request_ids()
        for request_id in ids:
            core.abort(request_id)
        return Failed(ids, repr(error))
    return StepDone(outputs, core.stats())


class CoreWorker:
    """The API side's handle on a running core: send messages, receive its replies."""

    def __init__(self, to_core: Connection, from_core: Connection, worker: Any) -> None:
        self._to_core, self._from_core, self.worker = to_core, from_core, worker
        self._sending = threading.Lock()  # several threads send; a pipe takes one at a time

    def send(self, message: ToCore) -> None:
        with self._sending:
            self._to_core.send(message)

    def receive(self) -> FromCore:
        """The core's next message (blocks; EOFError if the core has gone)."""
        return self._from_core.recv()

    def close(self, timeout: float = 30.0) -> None:
        """Ask the core to stop and wait for it (a process that will not stop is killed)."""
        with contextlib.suppress(OSError):  # already gone
            self.send(Shutdown())
        self.worker.join(timeout)
        if isinstance(self.worker, multiprocessing.process.BaseProcess) and self.worker.is_alive():
            self.worker.kill()
            self.worker.join()


def start_core(spec: CoreSpec, model: Llama | None = None) -> CoreWorker:
    """Run the core in a new process (which loads the model), or, given `model`, on a thread."""
    core_inbox, to_core = multiprocessing.Pipe(duplex=False)
    from_core, core_outbox = multiprocessing.Pipe(duplex=False)
    args = (spec, core_inbox, core_outbox, model)
    worker: threading.Thread | multiprocessing.process.BaseProcess
    if model is None:
        # "spawn": a fresh interpreter, not a copy of this one with its threads and locks.
        context = multiprocessing.get_context("spawn")
        worker = context.Process(target=run_core, args=args, name="llmserve-engine-core")
    else:
        worker = threading.Thread(target=run_core, args=args, name="llmserve-engine-core")
    worker.daemon = True
    worker.start()
    return CoreWorker(to_core, from_core, worker)
