"""Where the time of a served token goes: the API process, the hand-off, the core, the forward.

    python benchmarks/profile_engine.py [--concurrency 1 16 64] [--requests-per-user 6] [--compile]

How much of a served token's time is the model's forward pass, and where does the rest
go: the HTTP side, the hand-off between the processes, scheduling and batch building,
sampling, detokenization? This benchmark measures it, in five parts.

1. **The served engine, sampled.** ``llmserve-ref serve`` (the tiny model, float32, its
   engine core in a process of its own) runs as a subprocess on a free port, and
   ``llmserve-ref bench``'s client (`llmserve_ref.bench.bench_client`) drives it with
   the workload of benchmarks/engine.py: prompts of 32 tokens (a different slice of
   held-out stories each, so no prefix cache helps), 32 output tokens with
   ``ignore_eos``, greedy, a closed loop of C users. For each C the same load runs
   twice: once plain (how fast it is) and once with py-spy sampling both processes
   (``py-spy record --idle --threads --nonblocking``: every Python thread at every
   tick, waiting or not, so a thread's samples add up to the wall time). Each sample
   is given to one category by the frames on its stack: the innermost frame that a
   rule of `RULES` names decides (frames of torch and other unnamed code are passed
   through to their caller). Samples become milliseconds with the sampling window,
   and milliseconds per output token (1 user) or per engine step (more users, the
   steps counted by the server's ``iteration_tokens_total`` histogram). A thread's
   idle row is the wall time of the load less what that thread was seen doing.
2. **The forward, by op family.** In this process, the model loaded as the core loads
   it, a `ModelRunner` on paged KV runs decode steps at batch 1, 16 and 64 over
   32-token contexts, under `torch.profiler`. Its linear layers run as the engine runs
   them (fused, `llmserve_ref.engine.fused_projections`, and through oneDNN on a CPU
   with AVX-512, `llmserve_ref.engine.onednn_linear`). Every op's own (self) CPU time goes to
   the family of the outermost op or region it ran in: matmul, attention (the whole of
   `PagedBatch.attend`: the KV write, the paged gather, SDPA), norms and elementwise
   ops, copies and indexing, views; `PagedBatch` construction is batch building, and
   the step's time outside any op is the Python of the model's modules. The same steps
   timed without the profiler show what profiling added. With ``--compile`` the server
   runs ``serve --compile`` and each batch's step is also profiled compiled
   (`llmserve_ref.engine.compiled_decode`): the ops the graph calls out to (the matmuls,
   SDPA) by family, its generated kernels (the rest, the KV write too, fused) as one, and
   its entry (dynamo's guards, the wrappers) as another.
3. **Padding** (with ``--compile``). Decode steps of 1 to 100 sequences, eager and
   compiled at the size ``serve --compile --max-num-seqs 128`` pads them to, timed in
   turns, and whether the engine runs each compiled (it does, up to its largest size).
4. **The matrix multiplies, by library.** Every linear layer the engine runs (the model's,
   its projections fused: `llmserve_ref.engine.fused_projections`) at 1 to 2048 rows (a
   decode step's sequences, a prompt step's tokens), through `F.linear` (MKL's sgemm, in
   float32 on a CPU) and through oneDNN with the weight packed, in turns.
5. **A prompt step's memory.** A step of 16 and of 64 prompts, eagerly, each timed in a
   fresh process with glibc's default ``malloc`` settings and with
   `llmserve_ref.engine.malloc_tuning.keep_freed_memory` (what the serving processes
   call), beside the page faults each step takes.

One table for each part. Sampling takes CPU, and on a small machine the client, the
server's two processes and py-spy share the cores: the plain run beside the sampled one
shows how much that moved the wall time, and the CPU time each process used (from /proc)
shows how busy the machine was, including anything else that ran beside the benchmark
("rest of the machine"). Per step, the engine's steps are averaged as they came:
decode steps and the steps that also ran prompts. A benchmark reports; it never fails on
a ratio.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import dataclasses
import functools
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import httpx
import numpy as np
import torch
from torch.autograd.profiler_util import FunctionEvent

from llmserve_ref.bench.bench_client import run
from llmserve_ref.bench.bench_harness import busy_seconds, harness_config
from llmserve_ref.bench.bench_metrics import Summary
from llmserve_ref.engine.core_worker import core_threads
from llmserve_ref.engine.engine_config import EngineConfig
from llmserve_ref.engine.fused_projections import fuse_projections
from llmserve_ref.engine.malloc_tuning import keep_freed_memory
from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk, PagedBatch
from llmserve_ref.model.llama import Llama
from llmserve_ref.model.weights import TARGET_DIR
from llmserve_ref.serving.launcher import ANNOUNCED

PROMPT_LEN = OUTPUT_LEN = 32
BLOCK_SIZE = 16

# ------------------------------------------------------------------------------------------
# Part 1: the served engine under py-spy
# ------------------------------------------------------------------------------------------

HTTP = "HTTP server, event loop (uvicorn, h11, asyncio)"
HANDLERS = "handlers: parse, tokenize, JSON/SSE chunks"
OUTPUT = "output processing, detokenization"
HANDOFF = "hand-off (pipes, pickle, thread wake-ups)"
SCHEDULING = "scheduling (scheduler, block manager)"
BATCH = "batch building, step bookkeeping"
FORWARD = "forward (model, attention, torch ops)"
SAMPLING = "sampling"
OTHER = "other"
IDLE = "idle (waiting)"


@dataclass(frozen=True)
class Rule:
    """Frames of `process` ("api", "core" or "any") whose file name contains one of `paths`
    and, if `functions` is not empty, whose function is one of them, belong to `category`."""

    process: str
    paths: tuple[str, ...]
    functions: frozenset[str]
    category: str


def rule(process: str, paths: str, functions: str, category: str) -> Rule:
    return Rule(process, tuple(paths.split()), frozenset(functions.split()), category)


# The innermost frame that a rule names decides a sample; the first rule that names a frame
# is its rule. Frames no rule names (torch, functools, dataclasses' generated code) pass the
# sample to their caller; a stack with no named frame is "other".
RULES = (
    # Waiting: the event loop in select, the API's reader thread blocked on the core's pipe,
    # the core blocked in `inbox.poll(None)` (poll(0) returns at once), idle worker threads.
    rule("any", "/selectors.py", "select", IDLE),
    rule("api", "/multiprocessing/connection.py", "_recv", IDLE),
    rule("any", "/threading.py", "wait", IDLE),
    rule("any", "/concurrent/futures/thread.py", "_worker", IDLE),
    # Messages between the processes (pickled on pipes) and wake-ups between threads.
    rule("any", "/multiprocessing/ /pickle.py /copyreg.py", "", HANDOFF),
    rule("core", "/selectors.py", "", HANDOFF),
    rule("any", "/llmserve_ref/engine/core_worker.py", "", HANDOFF),
    rule("api", "/asyncio/base_events.py", "call_soon_threadsafe _write_to_self", HANDOFF),
    rule("api", "/asyncio/selector_events.py", "_write_to_self _read_from_self", HANDOFF),
    rule("api", "/asyncio/selector_events.py", "_process_self_data", HANDOFF),
    rule("api", "/llmserve_ref/engine/interface.py", "deliver _put_all", HANDOFF),
    rule("api", "/llmserve_ref/engine/batched_engine.py", "", HANDOFF),
    # The API process: token ids to text, requests in and chunks out, the HTTP server.
    rule("api", "/llmserve_ref/engine/output_processor.py /llmserve_ref/model/detokenizer.py",
         "", OUTPUT),
    rule("api", "/codecs.py", "", OUTPUT),
    rule("api", "/llmserve_ref/model/tokenizer.py", "decode", OUTPUT),
    rule("api", "/llmserve_ref/serving/app.py /llmserve_ref/serving/transport.py", "", HTTP),
    rule("api", "/llmserve_ref/ /json/ /pydantic/ /uuid.py", "", HANDLERS),
    rule("api", "/uvicorn/ /h11/ /httptools/ /starlette/ /anyio/ /asyncio/ /socket.py",
         "", HTTP),
    rule("api", "/logging/ /http/ /email/ /urllib/", "", HTTP),
    # The core: sample, run the model, schedule; the rest of a step is its bookkeeping.
    rule("core", "/llmserve_ref/engine/engine_core.py", "sample logprobs _pick", SAMPLING),
    rule("core", "/llmserve_ref/engine/engine_core.py", "_is_plain_greedy", SAMPLING),
    rule("core", "/llmserve_ref/model/sampling.py", "", SAMPLING),
    rule("core", "/llmserve_ref/model/llama.py /llmserve_ref/kernels/", "", FORWARD),
    rule("core", "/llmserve_ref/engine/paged_batch.py", "attend positions", FORWARD),
    rule("core", "/llmserve_ref/engine/kv_storage.py", "write keys values", FORWARD),
    rule("core", "/llmserve_ref/engine/compiled_decode.py", "hidden_states any_step paged_attend",
         FORWARD),
    rule("core", "/llmserve_ref/engine/onednn_linear.py", "", FORWARD),
    rule("core", "/llmserve_ref/engine/fused_projections.py", "project gate_up", FORWARD),
    rule("core", "/torchinductor_", "", FORWARD),  # the compiled graph's generated wrapper
    rule("core", "/llmserve_ref/engine/scheduler.py /llmserve_ref/engine/block_manager.py",
         "", SCHEDULING),
    rule("core", "/llmserve_ref/engine/kv_block.py /llmserve_ref/engine/request.py", "",
         SCHEDULING),
    rule("core", "/llmserve_ref/engine/scheduler_config.py", "", SCHEDULING),
    rule("core", "/llmserve_ref/", "", BATCH),
)  # fmt: skip
API_CATEGORIES = (HTTP, HANDLERS, OUTPUT, HANDOFF, OTHER, IDLE)
CORE_CATEGORIES = (HANDOFF, SCHEDULING, BATCH, FORWARD, SAMPLING, OTHER, IDLE)

# A thread's role, from a frame seen on any of its stacks (file piece, function).
ROLES = {
    "reader": ("/llmserve_ref/engine/batched_engine.py", "_read"),
    "loop": ("/asyncio/base_events.py", "run_forever"),
    "core": ("/llmserve_ref/engine/core_worker.py", "run_core"),
}
ROLE_TITLES = {
    "loop": "API process, event-loop thread",
    "reader": "API process, reader thread (core -> streams)",
    "other": "API process, other threads (busy time only)",
    "core": "engine-core process",
}
WAITING_ROLES = ("loop", "reader", "core")  # threads that live through the whole load

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass(frozen=True)
class Frame:
    function: str  # as py-spy names it: qualified, e.g. ``BatchedEngine._read``
    file: str

    @property
    def names(self) -> set[str]:
        """The parts of its qualified name (``PagedBatch.attend.<locals>.<genexpr>``: a
        generator inside `attend`); a rule that names one of them names the frame."""
        return set(self.function.split("."))

    @classmethod
    def parse(cls, text: str) -> Frame:
        m = FRAME.match(text)
        return cls(m["function"], m["file"]) if m else cls(text, "")

    def short(self) -> str:
        """`function (file)`, the file from its package on."""
        tail = re.split(r"/(?:site-packages|python3\.\d+|src)/", self.file)[-1]
        return f"{self.function} ({tail})"


def categorise(process: str, frames: Sequence[Frame]) -> tuple[str, Frame | None]:
    """The category of one sample (frames outermost first), and the frame that decided it."""
    for frame in reversed(frames):
        for r in RULES:
            if r.process not in ("any", process):
                continue
            if any(p in frame.file for p in r.paths) and (
                not r.functions or not r.functions.isdisjoint(frame.names)
            ):
                return r.category, frame
    return OTHER, frames[-1] if frames else None


@dataclass
class ThreadSamples:
    """One thread's samples: how many, by category, and by the frame that decided them."""

    total: int = 0
    role: str = "other"
    categories: collections.Counter[str] = field(default_factory=collections.Counter)
    functions: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)


def read_raw(path: Path, process: str) -> dict[str, ThreadSamples]:
    """py-spy's raw output (``thread (tid): name;frame;...;frame count`` per stack), by thread."""
    threads: dict[str, ThreadSamples] = collections.defaultdict(ThreadSamples)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *texts = stack.split(";")
        frames = [Frame.parse(t) for t in texts]
        t = threads[thread.split(":")[0]]
        t.total += int(count)
        category, decided = categorise(process, frames)
        t.categories[category] += int(count)
        if decided is not None:
            t.functions[(category, decided.short())] += int(count)
        for role, (piece, function) in ROLES.items():
            if any(function in f.names and piece in f.file for f in frames):
                t.role = role if t.role in ("other", role) else t.role
    return dict(threads)


def py_spy() -> str:
    """py-spy, next to this interpreter or on the PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        sys.exit("py-spy is not installed; this benchmark needs it: pip install py-spy")
    return found


class Sampler:
    """``py-spy record`` on one process while the ``with`` block runs; its window in seconds."""

    def __init__(self, pid: int, output: Path, rate: int) -> None:
        self.pid, self.output, self.rate = pid, output, rate
        self.window = 0.0
        self.log: list[str] = []

    def __enter__(self) -> Sampler:
        command = [py_spy(), "record", "--pid", str(self.pid), "--format", "raw", "--idle"]
        command += ["--threads", "--nonblocking", "--full-filenames"]
        command += ["--rate", str(self.rate), "--output", str(self.output)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:  # it says so once it has attached
            self.log.append(line.rstrip())
            if "Sampling process" in line:
                break
        else:
            self.process.wait()
            raise RuntimeError(
                f"py-spy could not sample pid {self.pid} (exit {self.process.returncode}):\n"
                + "\n".join(self.log)
                + "\nIt reads the process' memory: it needs ptrace rights (root, or "
                "CAP_SYS_PTRACE, or /proc/sys/kernel/yama/ptrace_scope at 0)."
            )
        self.started = time.perf_counter()
        self.cpu = 0.0  # py-spy's own CPU seconds, once it stops
        self.drain = threading.Thread(target=self._drain, daemon=True)  # its warnings
        self.drain.start()
        return self

    def _drain(self) -> None:
        assert self.process.stdout is not None
        self.log += [line.rstrip() for line in self.process.stdout]

    def __exit__(self, *exc: object) -> None:
        self.window = time.perf_counter() - self.started
        self.cpu = cpu_seconds(self.process.pid)
        self.process.send_signal(signal.SIGINT)  # py-spy writes its file and exits
        self.process.wait(timeout=60)
        self.drain.join(timeout=10)


@dataclass
class Server:
    url: str
    api_pid: int
    core_pid: int


def core_pid_of(api_pid: int) -> int:
    """The engine-core child of the API process (a "spawn" child; not its resource tracker)."""
    try:
        import psutil

        children = [(c.pid, c.cmdline()) for c in psutil.Process(api_pid).children()]
    except ImportError:  # read /proc instead
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == api_pid:
                    raw = (stat.parent / "cmdline").read_bytes()
                    children.append((int(stat.parent.name), raw.decode().split("\0")))
    for pid, cmdline in children:
        text = " ".join(cmdline)
        if "spawn_main" in text and "resource_tracker" not in text:
            return pid
    raise RuntimeError(f"no engine-core process under pid {api_pid}: {children}")


@contextlib.contextmanager
def served(log_path: Path, compile: bool, max_num_seqs: int) -> Iterator[Server]:
    """``llmserve-ref serve`` on a free port of 127.0.0.1 (``--compile``d or not, for at
    most `max_num_seqs` sequences: fewer sizes to compile), until the block ends."""
    command = [sys.executable, "-m", "llmserve_ref.cli", "serve", "--port", "0"]
    command += ["--max-num-seqs", str(max_num_seqs), *(["--compile"] if compile else [])]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not (m := ANNOUNCED.search(log_path.read_text())):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.2)
        yield Server(m[1], process.pid, core_pid_of(process.pid))
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def steps_run(url: str) -> tuple[int, int]:
    """The engine's steps so far, and the tokens they computed (prompt and decode): the count
    and the sum of ``iteration_tokens_total`` on /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = [
        re.search(rf"^llmserve:iteration_tokens_total_{what}\{{[^}}]*\}} (\S+)$", text, re.M)
        for what in ("count", "sum")
    ]
    if found[0] is None or found[1] is None:
        raise RuntimeError("no llmserve:iteration_tokens_total on /metrics")
    return int(float(found[0][1])), int(float(found[1][1]))


def bench(url: str, backend: str, users: int, requests: int, seed: int) -> Summary:
    config = harness_config(url, users, requests, seed, PROMPT_LEN, OUTPUT_LEN)
    config = dataclasses.replace(config, backend=backend)
    s = run(config).summary()
    assert s.failed == 0 and s.total_output_tokens == requests * OUTPUT_LEN, s
    return s


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, all threads) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def cpu_used(pids: dict[str, int]) -> Iterator[dict[str, float]]:
    """CPU seconds that each named process, this one (the bench client) and the whole machine
    ("machine") use in the block."""
    used: dict[str, float] = {}
    start = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client, machine = time.process_time(), busy_seconds()
    yield used
    used.update({name: cpu_seconds(pid) - start[name] for name, pid in pids.items()})
    used["bench client"] = time.process_time() - client
    used["machine"] = busy_seconds() - machine


@dataclass(frozen=True)
class Load:
    """One run of the load: its wall time, output tokens, engine steps, median TPOT, and the
    CPU seconds each process used."""

    wall_s: float
    tokens: int
    steps: int
    computed: int  # tokens the steps computed: prompts and decodes
    tpot_ms: float
    cpu: dict[str, float]

    def per(self, users: int) -> int:
        """What the table divides by: output tokens at 1 user, engine steps above."""
        return self.tokens if users == 1 else self.steps


CPU_USERS = ("API process", "engine core", "bench client", "py-spy", "rest of the machine")


def load(
    server: Server,
    backend: str,
    users: int,
    requests: int,
    seed: int,
    samplers: Sequence[Sampler] = (),
) -> Load:
    """Run the load once, under `samplers` if any."""
    steps, computed = steps_run(server.url)
    with contextlib.ExitStack() as stack:
        for sampler in samplers:
            stack.enter_context(sampler)
        with cpu_used({"API process": server.api_pid, "engine core": server.core_pid}) as cpu:
            s = bench(server.url, backend, users, requests, seed)
    cpu["py-spy"] = sum(sampler.cpu for sampler in samplers)
    cpu["rest of the machine"] = cpu.pop("machine") - sum(cpu.values())
    steps_after, computed_after = steps_run(server.url)
    steps, computed = steps_after - steps, computed_after - computed
    return Load(s.duration, s.total_output_tokens, steps, computed, s.tpot.median * 1e3, cpu)


@dataclass
class Served:
    """One concurrency: the plain run, the sampled run, and seconds by role and category."""

    users: int
    plain: Load
    sampled: Load
    seconds: dict[str, dict[str, float]]  # role -> category -> seconds in the sampled run
    functions: dict[str, collections.Counter[tuple[str, str]]]  # role -> seconds by frame

    def ms(self, role: str, category: str) -> float:
        return self.seconds.get(role, {}).get(category, 0.0) * 1e3 / self.sampled.per(self.users)


def attribute(
    threads: dict[str, ThreadSamples], window: float, wall: float
) -> tuple[dict[str, dict[str, float]], dict[str, collections.Counter[tuple[str, str]]]]:
    """Seconds by role and category: a sample is 1/rate seconds, the rate being what py-spy
    kept up over the window (its busiest thread's samples / window); a waiting role's idle
    time is the load's wall time less what the thread was seen doing."""
    if not threads:
        raise RuntimeError("py-spy recorded no samples")
    rate = max(t.total for t in threads.values()) / window
    seconds: dict[str, dict[str, float]] = collections.defaultdict(dict)
    functions: dict[str, collections.Counter[tuple[str, str]]] = collections.defaultdict(
        collections.Counter
    )
    for t in threads.values():
        for category, n in t.categories.items():
            if category != IDLE:
                seconds[t.role][category] = seconds[t.role].get(category, 0.0) + n / rate
        for key, n in t.functions.items():
            functions[t.role][key] += n / rate
    for role in WAITING_ROLES:
        if role in seconds or any(t.role == role for t in threads.values()):
            seconds[role][IDLE] = max(0.0, wall - sum(seconds[role].values()))
    return dict(seconds), dict(functions)


def profile_served(
    server: Server, backend: str, users: int, requests: int, rate: int, raw_dir: Path
) -> Served:
    """Warm up, run the load plain, then again with py-spy on both processes."""
    seed = 1000 * users  # each run its own prompts: nothing in the prefix cache helps
    bench(server.url, backend, users, users, seed + 1)
    plain = load(server, backend, users, requests, seed + 2)
    api_raw, core_raw = raw_dir / f"api-{users}.txt", raw_dir / f"core-{users}.txt"
    api = Sampler(server.api_pid, api_raw, rate)
    core = Sampler(server.core_pid, core_raw, rate)
    sampled = load(server, backend, users, requests, seed + 3, [api, core])
    seconds, functions = attribute(read_raw(api_raw, "api"), api.window, sampled.wall_s)
    core_seconds, core_functions = attribute(
        read_raw(core_raw, "core"), core.window, sampled.wall_s
    )
    return Served(users, plain, sampled, seconds | core_seconds, functions | core_functions)


WIDTH = 46  # the label column of the tables


def table_row(label: str, values: Sequence[float], form: str = "13.2f") -> None:
    print(f"{label:<{WIDTH}}" + "".join(f"{v:{form}}" for v in values))


def print_served(rows: list[Served]) -> None:
    users = [f"{r.users} user{'s' if r.users > 1 else ''}" for r in rows]
    units = ["ms/token" if r.users == 1 else "ms/step" for r in rows]
    print(f"{'':<{WIDTH}}" + "".join(f"{u:>13}" for u in users))
    print(f"{'':<{WIDTH}}" + "".join(f"{u:>13}" for u in units))
    for role, categories in (
        ("loop", API_CATEGORIES),
        ("reader", API_CATEGORIES),
        ("other", API_CATEGORIES),
        ("core", CORE_CATEGORIES),
    ):
        if not any(role in r.seconds for r in rows):
            continue
        print(ROLE_TITLES[role])
        for category in categories:
            values = [r.ms(role, category) for r in rows]
            if any(v >= 0.005 for v in values):
                table_row(f"  {category}", values)
        table_row("  (sum)", [sum(r.ms(role, c) for c in categories) for r in rows])
    wall = [r.sampled.wall_s * 1e3 / r.sampled.per(r.users) for r in rows]
    print("measured")
    table_row("  wall per token / step, sampled run", wall)
    table_row(
        "  wall per token / step, plain run",
        [r.plain.wall_s * 1e3 / r.plain.per(r.users) for r in rows],
    )
    table_row("  median TPOT (client), sampled run", [r.sampled.tpot_ms for r in rows])
    table_row("  median TPOT (client), plain run", [r.plain.tpot_ms for r in rows])
    table_row("  output tokens per step", [r.sampled.tokens / r.sampled.steps for r in rows])
    table_row(
        "  tokens computed per step (prompt + decode)",
        [r.sampled.computed / r.sampled.steps for r in rows],
    )
    table_row("  engine steps, sampled run", [r.sampled.steps for r in rows], "13.0f")
    for which in ("plain", "sampled"):
        print_cpu(rows, which)
    table_row(
        "  forward / wall, sampled run",
        [r.ms("core", FORWARD) / w for r, w in zip(rows, wall, strict=True)],
    )


def print_cpu(rows: list[Served], which: str) -> None:
    """The CPU time each process used per token / step in the plain or sampled run, and what
    share of the machine they used together."""
    loads = [(getattr(r, which), r.users) for r in rows]
    print(f"  CPU time per token / step, {which} run")
    for who in CPU_USERS:
        if which == "sampled" or who != "py-spy":
            table_row(f"    {who}", [x.cpu[who] * 1e3 / x.per(users) for x, users in loads])
    cores = os.cpu_count() or 1
    busy = [sum(x.cpu.values()) / (x.wall_s * cores) for x, _ in loads]
    table_row(f"    the machine busy: all / ({cores} cores x wall)", busy)


def print_top_functions(rows: list[Served], count: int = 6) -> None:
    """The frames that decided the most time outside the forward and idle, by role."""
    for r in rows:
        print(f"{r.users} user(s), ms per {'token' if r.users == 1 else 'step'}:")
        for role in ("loop", "reader", "core"):
            frames = r.functions.get(role) or collections.Counter()
            ranked = [
                (category, where, s)
                for (category, where), s in frames.most_common()
                if category not in (IDLE, FORWARD)
            ][:count]
            print(f"  {ROLE_TITLES[role]}")
            for category, where, s in ranked:
                ms = s * 1e3 / r.sampled.per(r.users)
                print(f"    {ms:7.3f}  {where}  [{category.split(' (')[0]}]")


# ------------------------------------------------------------------------------------------
# Part 2: the forward by op family, under torch.profiler
# ------------------------------------------------------------------------------------------

STEP = "decode step"
PADDED = (1, 3, 12, 15, 16, 17, 20, 33, 63, 64, 65, 100)  # sequences in a step (Part 3)
ATTENTION = "PagedBatch.attend"
BUILD = "PagedBatch.__init__"
OP_FAMILIES = {  # aten's ops by name; others with their namespace
    "matmul, linear": (
        "linear matmul mm addmm bmm mkldnn::_linear_pointwise llmserve::onednn_linear"
    ),
    "norms, elementwise (rms norm, rope, silu)": (
        "pow mean rsqrt add add_ mul mul_ silu neg sub div"
    ),
    "copies, indexing (cat, index, copy_, to)": (
        "cat index index_select embedding index_copy_ copy_ to _to_copy clone contiguous "
        "empty empty_like zeros fill_"
    ),
    "views (view, transpose, slice, reshape)": (
        "view transpose slice select reshape flatten expand unsqueeze as_strided t "
        "_unsafe_view alias detach unflatten split split_with_sizes chunk"
    ),
}
FAMILY_OF = {
    op if "::" in op else f"aten::{op}": family
    for family, ops in OP_FAMILIES.items()
    for op in ops.split()
}
ATTENTION_PARTS = {
    "aten::index_copy_": "attention: KV write (index_copy_)",
    "aten::index": "attention: paged KV gather (index)",
    "aten::scaled_dot_product_attention": "attention: SDPA",
}
BATCH_FAMILY = "batch building (PagedBatch)"
PYTHON_FAMILY = "Python between ops (modules, glue)"
OTHER_FAMILY = "other ops"
# In a compiled step: the ops the graph calls out to, its own generated kernels (the
# elementwise ops, norms, RoPE, the KV write, the paged gather and the mask, fused), its entry
# (dynamo's guards on the inputs, the wrappers around the graph).
COMPILED_PARTS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": ATTENTION_PARTS[
        "aten::scaled_dot_product_attention"
    ],
}
COMPILED_KERNELS = "compiled: generated kernels (fused ops)"
COMPILED_ENTRY = "compiled: guards, graph entry"
FAMILIES = (
    *OP_FAMILIES,
    *ATTENTION_PARTS.values(),
    "attention: other (mask, views, glue)",
    COMPILED_KERNELS,
    COMPILED_ENTRY,
    BATCH_FAMILY,
    OTHER_FAMILY,
    PYTHON_FAMILY,
)


def compiled_family(names: Sequence[str]) -> str | None:
    """The family of self time inside a compiled graph's call (`names`: the regions and ops
    it is in, outermost first), or None outside one."""
    if not any(n.startswith(("Torch-Compiled Region", "TorchDynamo")) for n in names):
        return None
    for n in names:
        if n in COMPILED_PARTS or n in FAMILY_OF:
            return COMPILED_PARTS.get(n) or FAMILY_OF[n]
    return COMPILED_KERNELS if any("CompiledFxGraph" in n for n in names) else COMPILED_ENTRY


def family(event: FunctionEvent) -> str | None:
    """The family of one event's self time: that of the outermost op or region it is in."""
    chain = [event]
    while chain[-1].cpu_parent is not None:
        chain.append(chain[-1].cpu_parent)
    chain.reverse()  # outermost first
    if chain[0].name != STEP:
        return None  # outside the profiled steps (warm-up of the profiler itself)
    if len(chain) == 1:
        return PYTHON_FAMILY
    inside = chain[1:]
    if inside[0].name == ATTENTION:
        part = inside[1].name if len(inside) > 1 else ""
        return ATTENTION_PARTS.get(part, "attention: other (mask, views, glue)")
    if inside[0].name == BUILD:
        return BATCH_FAMILY
    if compiled := compiled_family([e.name for e in inside]):
        return compiled
    for e in inside:
        if e.name in FAMILY_OF:
            return FAMILY_OF[e.name]
    return OTHER_FAMILY


def labelled(cls: type, name: str, label: str) -> contextlib.AbstractContextManager[object]:
    """Patch `cls.name` to run inside a profiler region called `label`."""
    original = getattr(cls, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        with torch.profiler.record_function(label):
            return original(*args, **kwargs)

    return mock.patch.object(cls, name, wrapper)


@dataclass(frozen=True)
class ForwardProfile:
    batch: int
    compiled: bool  # the step compiled for its batch size (`serve --compile`), or eager
    plain_ms: float  # median ModelRunner.forward, no profiler
    profiled_ms: float  # mean of the profiled steps
    families: dict[str, float]  # ms per step


def decode_setup(
    model: Llama, batch: int, sizes: Sequence[int] = ()
) -> tuple[ModelRunner, list[Chunk]]:
    """A runner whose `batch` sequences hold 32 prompt tokens, and their next decode step;
    with `sizes`, the step compiled for them, as ``serve --compile`` runs it."""
    blocks = -(-(PROMPT_LEN + 1) // BLOCK_SIZE)
    runner = ModelRunner(model, batch * blocks + 1, BLOCK_SIZE, compile_sizes=sizes)
    if runner.compiled:
        runner.compiled.warm_up()
    rng = np.random.default_rng(batch)
    tables = [list(range(1 + b * blocks, 1 + (b + 1) * blocks)) for b in range(batch)]
    vocab = model.config.vocab_size
    prompts = [rng.integers(2, vocab, PROMPT_LEN).tolist() for _ in range(batch)]
    runner.forward([Chunk(p, 0, t, True) for p, t in zip(prompts, tables, strict=True)])
    # Every step writes position 32 again: each sequence attends over a 33-token context.
    decode = [Chunk([int(rng.integers(2, vocab))], PROMPT_LEN, t, True) for t in tables]
    return runner, decode


def timed(step: Callable[[], object], steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def profile_forward(model: Llama, batch: int, steps: int, compiled: bool) -> ForwardProfile:
    runner, decode = decode_setup(model, batch, [batch] if compiled else [])

    def step() -> torch.Tensor:
        return runner.forward(decode)

    for _ in range(5):
        step()
    plain = timed(step, steps)
    with (
        labelled(PagedBatch, "attend", ATTENTION),
        labelled(PagedBatch, "__init__", BUILD),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
    ):
        for _ in range(steps):
            with torch.profiler.record_function(STEP):
                step()
    events = list(prof.events())
    totals: dict[str, float] = collections.Counter()
    for e in events:
        f = family(e)
        if f is not None:
            totals[f] += e.self_cpu_time_total / 1e3 / steps
    profiled = sum(e.cpu_time_total for e in events if e.name == STEP) / 1e3 / steps
    return ForwardProfile(batch, compiled, plain, profiled, dict(totals))


@dataclass(frozen=True)
class Padded:
    sequences: int
    size: int  # the compiled size the step is padded to
    eager_ms: float
    compiled_ms: float  # padded to `size`
    engine_compiles: bool  # whether the engine runs it compiled (`CompiledDecode.size_for`)


def in_turns(calls: Sequence[Callable[[], object]], steps: int) -> list[float]:
    """Each call's median time in ms over `steps` rounds, the calls timed in turns in each
    round (so that the machine's slow moments fall on all of them), after 5 rounds of
    warm-up."""
    times: list[list[float]] = [[] for _ in calls]
    for i in range(5 + steps):
        for call, spent in zip(calls, times, strict=True):
            start = time.perf_counter()
            call()
            if i >= 5:
                spent.append((time.perf_counter() - start) * 1e3)
    return [float(np.median(t)) for t in times]


def padding_sweep(model: Llama, counts: Sequence[int], steps: int) -> list[Padded]:
    """Decode steps of each count of sequences, eager and compiled at the size that
    ``serve --compile --max-num-seqs 128`` pads them to, timed in turns."""
    sizes = EngineConfig(max_num_seqs=128, compile=True).compile_sizes
    rows = []
    for n in counts:
        size = next(s for s in sizes if s >= n)
        (eager, decode), (compiled, _) = decode_setup(model, n), decode_setup(model, n, [size])
        medians = in_turns([functools.partial(r.forward, decode) for r in (eager, compiled)], steps)
        compiles = compiled.compiled is not None and compiled.compiled.size_for(decode) is not None
        rows.append(Padded(n, size, *medians, compiles))
    return rows


def print_padding(rows: list[Padded]) -> None:
    print(f"{'sequences':>10} {'padded to':>9} {'eager ms':>9} {'compiled ms':>12} {'ratio':>6}"
          f"  the engine runs it")  # fmt: skip
    for r in rows:
        ratio = r.compiled_ms / r.eager_ms
        print(f"{r.sequences:>10} {r.size:>9} {r.eager_ms:>9.3f} {r.compiled_ms:>12.3f}", end="")
        print(f" {ratio:>6.2f}  {'compiled' if r.engine_compiles else 'eagerly'}")


def print_forward(rows: list[ForwardProfile]) -> None:
    print(f"{'':<{WIDTH}}" + "".join(f"{f'batch {r.batch}':>13}" for r in rows))
    print(f"{'':<{WIDTH}}" + "".join(f"{'compiled' if r.compiled else 'eager':>13}" for r in rows))
    print(f"{'':<{WIDTH}}" + "".join(f"{'ms/step':>13}" for _ in rows))
    for f in FAMILIES:
        values = [r.families.get(f, 0.0) for r in rows]
        if any(v >= 0.0005 for v in values):
            table_row(f"  {f}", values, "13.3f")
    table_row("  (sum: the profiled step)", [r.profiled_ms for r in rows], "13.3f")
    table_row("ModelRunner.forward, no profiler (median)", [r.plain_ms for r in rows], "13.3f")
    table_row("profiled / plain", [r.profiled_ms / r.plain_ms for r in rows])


MATMUL_ROWS = (1, 4, 16, 64, 2048)  # a decode step's sequences, or a prompt step's tokens


@dataclass(frozen=True)
class Matmuls:
    rows: int
    mkl_ms: float  # the step's linear layers through F.linear (MKL's sgemm), summed medians
    onednn_ms: float  # the same through oneDNN, weights packed (`OneDNNLinear`'s product)
    gflop: float  # the step's multiply-adds, x2


@torch.inference_mode()
def matmul_libraries(weights: Sequence[torch.Tensor], steps: int) -> list[Matmuls]:
    """A product with each of `weights` at each of `MATMUL_ROWS` rows, through MKL and
    through oneDNN with the weight packed, timed in turns; per row count, the sum."""
    rows_of = []
    for rows in MATMUL_ROWS:
        mkl_ms = onednn_ms = 0.0
        for weight in weights:
            x = torch.randn(1, rows, weight.shape[1])
            packed = torch.ops.mkldnn._reorder_linear_weight(weight)
            mkl, onednn = in_turns(
                [
                    functools.partial(torch.nn.functional.linear, x, weight),
                    functools.partial(torch.ops.mkldnn._linear_pointwise, x, packed, None,
                                      "none", [], ""),
                ],
                steps,
            )  # fmt: skip
            mkl_ms, onednn_ms = mkl_ms + mkl, onednn_ms + onednn
        gflop = 2 * rows * sum(w.numel() for w in weights) / 1e9
        rows_of.append(Matmuls(rows, mkl_ms, onednn_ms, gflop))
    return rows_of


def print_matmuls(rows: list[Matmuls]) -> None:
    print(f"{'rows':>6} {'MKL ms':>9} {'GFLOP/s':>8} {'oneDNN ms':>10} {'GFLOP/s':>8}"
          f" {'oneDNN/MKL':>11}")  # fmt: skip
    for r in rows:
        print(f"{r.rows:>6} {r.mkl_ms:>9.3f} {r.gflop / r.mkl_ms * 1e3:>8.0f} "
              f"{r.onednn_ms:>10.3f} {r.gflop / r.onednn_ms * 1e3:>8.0f} "
              f"{r.onednn_ms / r.mkl_ms:>11.2f}")  # fmt: skip


PROMPT_STEPS = (16, 64)  # prompts of PROMPT_LEN tokens in a step: 16 and 64 users arriving


@dataclass(frozen=True)
class PromptStep:
    prompts: int
    kept: bool  # `keep_freed_memory` called in the step's process
    ms: float  # median ModelRunner.forward
    page_faults: float  # minor page faults per step, the process's (getrusage)


def prompt_step(prompts: int, keep: bool, threads: int, steps: int) -> PromptStep:
    """A step of `prompts` prompts of PROMPT_LEN tokens, eagerly, timed in this process
    (a fresh one: glibc's settings cannot be put back), with freed memory kept or not."""
    torch.set_num_threads(threads)
    if keep:
        keep_freed_memory()
    model = Llama.from_pretrained(TARGET_DIR, "cpu")
    blocks = -(-PROMPT_LEN // BLOCK_SIZE)
    runner = ModelRunner(model, prompts * blocks, BLOCK_SIZE)
    rng = np.random.default_rng(prompts)
    chunks = [
        Chunk(rng.integers(2, model.config.vocab_size, PROMPT_LEN).tolist(), 0,
              list(range(b * blocks, (b + 1) * blocks)), samples=True)
        for b in range(prompts)
    ]  # fmt: skip
    step = functools.partial(runner.forward, chunks)  # each step writes the same slots again
    for _ in range(3):
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ms = timed(step, steps)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return PromptStep(prompts, keep, ms, faults / steps)


def prompt_steps(threads: int, steps: int) -> list[PromptStep]:
    """`prompt_step` for each of `PROMPT_STEPS`, memory returned then kept, each in a fresh
    process."""
    context = multiprocessing.get_context("spawn")
    rows = []
    for prompts in PROMPT_STEPS:
        for keep in (False, True):
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                rows.append(pool.submit(prompt_step, prompts, keep, threads, steps).result())
    return rows


def print_prompt_steps(rows: list[PromptStep]) -> None:
    print(
        f"{'prompts':>8} {'tokens':>7} {'freed memory':>13} {'ms/step':>8} {'page faults/step':>17}"
    )
    for r in rows:
        print(f"{r.prompts:>8} {r.prompts * PROMPT_LEN:>7} {'kept' if r.kept else 'returned':>13} "
              f"{r.ms:>8.2f} {r.page_faults:>17.0f}")  # fmt: skip


# ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--requests-per-user", type=int, default=6, help="at least 48 in all")
    parser.add_argument("--backend", choices=["openai", "openai-chat"], default="openai")
    parser.add_argument("--rate", type=int, default=200, help="py-spy's samples per second")
    parser.add_argument("--forward-steps", type=int, default=30)
    parser.add_argument(
        "--compile",
        action="store_true",
        help="serve with --compile, and profile the compiled decode step beside the eager one",
    )
    parser.add_argument("--raw-dir", type=Path, help="keep py-spy's files and the server log here")
    parser.add_argument("--json", type=Path, help="also write both tables' numbers here")
    args = parser.parse_args()
    py_spy()  # before anything starts: is it there?
    raw_dir = args.raw_dir or Path(tempfile.mkdtemp(prefix="profile_engine-"))
    raw_dir.mkdir(parents=True, exist_ok=True)
    cores, threads = os.cpu_count() or 2, core_threads()
    print(
        f"prompts of {PROMPT_LEN} tokens, {OUTPUT_LEN} output tokens (ignore_eos), greedy, "
        f"closed loop, /v1/{'chat/' if args.backend == 'openai-chat' else ''}completions; "
        f"{cores} cores, the core process with {threads} torch thread(s); py-spy "
        f"{args.rate} Hz; raw samples in {raw_dir}"
    )
    started = time.perf_counter()
    rows = []
    with served(raw_dir / "server.log", args.compile, max(args.concurrency)) as server:
        for users in args.concurrency:
            requests = max(48, users * args.requests_per_user)
            rows.append(profile_served(server, args.backend, users, requests, args.rate, raw_dir))
    print("\nPart 1: the served engine, py-spy on both processes")
    print_served(rows)
    print("\nwhere the time outside the forward and idle went (deciding frame, category):")
    print_top_functions(rows)
    torch.set_num_threads(threads)  # as the core process runs
    keep_freed_memory()
    model = Llama.from_pretrained(TARGET_DIR, "cpu")
    batches = [1, 16, 64]
    modes = [False, True] if args.compile else [False]
    forward = [profile_forward(model, b, args.forward_steps, c) for b in batches for c in modes]
    print(f"\nPart 2: one decode step by op family, {threads} torch thread(s), torch.profiler")
    print_forward(forward)
    padding = padding_sweep(model, PADDED, args.forward_steps) if args.compile else []
    if padding:
        print("\nPart 3: decode steps padded to the compiled sizes, medians, no profiler")
        print_padding(padding)
    engine_model = fuse_projections(copy.deepcopy(model))  # the linear layers the engine runs
    weights = [m.weight.detach() for m in engine_model.modules() if isinstance(m, torch.nn.Linear)]
    matmuls = matmul_libraries(weights, args.forward_steps)
    print(
        f"\nPart 4: a step's {len(weights)} matrix multiplies (projections fused) by library, "
        f"{threads} torch thread(s), medians"
    )
    print_matmuls(matmuls)
    prompts = prompt_steps(threads, args.forward_steps)
    print(
        f"\nPart 5: prompt steps, eager, freed memory returned or kept, {threads} torch "
        "thread(s), medians, each in a fresh process"
    )
    print_prompt_steps(prompts)
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    if args.json:
        found = as_json(rows, forward, padding, matmuls, prompts)
        args.json.write_text(json.dumps(found, indent=1))


def as_json(
    rows: list[Served],
    forward: list[ForwardProfile],
    padding: list[Padded],
    matmuls: list[Matmuls],
    prompts: list[PromptStep],
) -> dict[str, object]:
    """Both tables' numbers: per load, ms per token (1 user) or step by role and category,
    the wall and the client's TPOT; per batch, ms per decode step by op family."""
    return {
        "served": [
            {
                "users": r.users,
                "ms": {
                    role: {c: r.ms(role, c) for c in categories}
                    for role, categories in r.seconds.items()
                },
                "wall_ms": r.sampled.wall_s * 1e3 / r.sampled.per(r.users),
                "plain_wall_ms": r.plain.wall_s * 1e3 / r.plain.per(r.users),
                "tpot_ms": r.plain.tpot_ms,
            }
            for r in rows
        ],
        "forward": [vars(f) for f in forward],
        "padding": [vars(p) for p in padding],
        "matmuls": [vars(m) for m in matmuls],
        "prompt_steps": [vars(p) for p in prompts],
    }


if __name__ == "__main__":
    main()
