"""Start and stop real serving engines for `nox -s engines`: vLLM's CPU build, ours, and
llama.cpp's `llama-server` on our GGUF export.

Each server runs in a process group of its own (a new session), so stopping it stops
every process it started: vLLM runs three (the API server, its EngineCore and a Worker).
Everything a server prints goes to a log file; a server that exits or is not ready in
time fails with the last lines of its log. Stopping is SIGTERM to the group, then SIGKILL
to whatever is left after a grace period.

`with_servers.py` starts both around a whole pytest run and tells the tests and the page
where they are through the environment (`page_env`); `running` reads it back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from llmserve_ref.engine.core_worker import core_threads
from llmserve_ref.model.gguf_export import export
from llmserve_ref.model.weights import TARGET_DIR
from llmserve_ref.serving.launcher import ANNOUNCED

ROOT = Path(__file__).resolve().parents[2]  # the repository
MODEL_DIR = TARGET_DIR
MODEL_NAME = "tiny"  # what clients put in "model", on both servers
# Prompts every engine must continue as our model does, greedily, token for token.
PROMPTS = [
    "Once upon a time,",
    "The little fox",
    "Mia had a red ball.",
    "<|user|>Tell me a story.<|assistant|>",  # the chat template, written out by hand
    # Longer than one 32-token block: the prompt's KV spans two blocks on both servers.
    "Sam and Lily went to the park. They saw a big dog with a red ball. Sam wanted to "
    "play with the dog, but Lily was scared. The dog ran to them and",
]
# Both servers get the same flags: float32, 256 tokens of context (the tiny model's
# max_position_embeddings), blocks of 32 tokens (vLLM's CPU attention needs a multiple of
# 32), and a KV cache budget that is deliberately not a whole number of blocks, so that
# test_kv_size_vs_vllm sees how vLLM rounds it.
MAX_MODEL_LEN = 256
BLOCK_SIZE = 32
KV_CACHE_MEMORY_BYTES = 64 * 2**20 + 40_000  # 64 MiB and 19.5 tokens of float32 KV
MAX_NUM_SEQS = 128  # vLLM's default on a CPU (ours is 256): set on both, they are the same
MAX_NUM_BATCHED_TOKENS = 2048  # vLLM's default on a CPU, and ours
# Prompt lookup, as the speculative-decoding page launches a second pair of servers with it,
# and the draft model, a third pair (the package's draft, copied beside the model: both
# servers start in that folder, and both take its path).
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
         "prompt_lookup_max": 4}  # fmt: skip
DRAFT = {"method": "draft_model", "model": "./tiny-draft", "num_speculative_tokens": 4}
GUESSING = {"ngram": NGRAM, "draft": DRAFT}  # by the word that ends the servers' names


def named(engine: str, speculative_config: dict | None) -> str:
    """A server's name: its engine's, then how it guesses ("vLLM ngram", "llmserve-ref draft")."""
    if speculative_config is None:
        return engine
    return f"{engine} {next(k for k, c in GUESSING.items() if c == speculative_config)}"


def knobs(block_size: int, kv_cache_memory_bytes: int) -> list[str]:
    """The flags both servers take, with the same meaning: the page's launch commands."""
    return [
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--max-num-seqs",
        str(MAX_NUM_SEQS),
        "--max-num-batched-tokens",
        str(MAX_NUM_BATCHED_TOKENS),
        "--block-size",
        str(block_size),
        "--enable-prefix-caching",
        "--kv-cache-memory-bytes",
        str(kv_cache_memory_bytes),
    ]


# Each test module starts with `if not servers.HAVE_VLLM: pytest.skip(servers.NEEDS_VLLM, ...)`:
# where vLLM is not installed (the `tests` session), one visible skip per module.
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
NEEDS_VLLM = "needs vLLM: run `nox -s engines`"
# llama.cpp's `llama-server`, which `nox -s engines` builds and names here.
LLAMA_SERVER = "LLAMA_SERVER"
HAVE_LLAMA_CPP = Path(os.environ.get(LLAMA_SERVER) or "/nonexistent").is_file()
NEEDS_LLAMA_CPP = "needs llama.cpp's llama-server: run `nox -s engines`, which builds it"


@dataclass
class Server:
    """A running server: its process, where it listens, its log, and how long it took to start."""

    name: str
    process: subprocess.Popen | None  # None: started by someone else (see `running`)
    log: Path
    url: str = ""  # http://127.0.0.1:PORT
    command: tuple[str, ...] = ()
    ready_after: float = 0.0  # seconds from start to the first healthy answer

    @property
    def base_url(self) -> str:
        """What OpenAI clients take: the URL with /v1."""
        return f"{self.url}/v1"

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vllm_env() -> dict[str, str]:
    """The environment vLLM's server and its benchmark client run in."""
    env = dict(os.environ)
    # It silently overrides --kv-cache-memory-bytes (and an empty value crashes the worker).
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        HF_HUB_OFFLINE="1",  # the model and tokenizer are local; never ask the Hub
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def start(name: str, command: list[str], log: Path, env: dict[str, str]) -> Server:
    """Start `command` in a new process group, its stdout and stderr going to `log`."""
    with log.open("wb") as out:  # the child keeps its own copy of the file descriptor
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,
            start_new_session=True,
        )
    return Server(name, process, log, command=tuple(command))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we cannot signal: treat the group as still there
        return True
    return True


def stop(server: Server, grace: float = 20.0) -> None:
    """SIGTERM the server's process group, wait up to `grace` seconds, then SIGKILL the rest."""
    pgid = server.process.pid  # start_new_session: the group id is the leader's pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        server.process.poll()  # reap the leader, so that it does not linger as a zombie
        if not _group_alive(pgid):
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.process.wait(timeout=10)


def wait_healthy(server: Server, timeout: float, started: float) -> None:
    """Poll GET /health until it answers 200; fail with the log's tail if the server
    exits or `timeout` seconds pass."""
    deadline = started + timeout
    while True:
        if server.process is not None and server.process.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with status {server.process.returncode} before it was "
                f"ready; the last lines of {server.log}:\n{server.tail()}"
            )
        if server.url:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                    server.ready_after = time.monotonic() - started
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{server.name} was not ready after {timeout:.0f} s; "
                f"the last lines of {server.log}:\n{server.tail()}"
            )
        time.sleep(0.5)


def speculating(config: dict | None) -> list[str]:
    """``--speculative-config`` with `config` as JSON, or nothing for None."""
    return [] if config is None else ["--speculative-config", json.dumps(config)]


def vllm_command(
    model_dir: Path,
    port: int,
    block_size: int,
    kv_cache_memory_bytes: int,
    speculative_config: dict | None = None,
) -> list[str]:
    """vLLM's OpenAI server on `model_dir`, in float32, with the `knobs` (the page's launch)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",  # bfloat16 flips near-ties in the logits; float32 matches ours exactly
        "--enable-prompt-tokens-details",  # usage's cached_tokens, which ours always reports
        *speculating(speculative_config),
        *knobs(block_size, kv_cache_memory_bytes),
    ]


@contextlib.contextmanager
def launched(
    name: str, command: list[str], log: Path, env: dict[str, str], port: int, timeout: float
) -> Iterator[Server]:
    """`command`, started and answering on `port` on 127.0.0.1, stopped when the block ends."""
    started = time.monotonic()
    server = start(name, command, log, env)
    server.url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(server, timeout, started)
        yield server
    finally:
        stop(server)


@contextlib.contextmanager
def vllm_server(
    model_dir: Path,
    log_dir: Path,
    *,
    kv_cache_memory_bytes: int,
    block_size: int,
    speculative_config: dict | None = None,
    timeout: float = 240.0,
) -> Iterator[Server]:
    """vLLM's OpenAI server on `model_dir` in float32, on a free port, while the block runs.

    It starts in 35 to 70 s on two cores (imports in three processes, torch.compile).
    `--block-size` must be a multiple of 32 on the CPU (16 fails); the CPU default is 128.
    `python -m vllm.entrypoints.openai.api_server` is used because the `vllm` command
    does not run from the vllm-cpu distribution (see vllm_cli.py).
    """
    port = free_port()
    command = vllm_command(model_dir, port, block_size, kv_cache_memory_bytes, speculative_config)
    name = named("vLLM", speculative_config)
    log = log_dir / f"{name.replace(' ', '-')}.log"
    with launched(name, command, log, vllm_env(), port, timeout) as server:
        yield server


def our_command(
    port: int,
    block_size: int,
    kv_cache_memory_bytes: int,
    speculative_config: dict | None = None,
    compile: bool = True,
) -> list[str]:
    """``llmserve-ref serve`` on `port` (0: any free one) with the `knobs` (the page's launch):
    its forward pass compiled, as vLLM compiles its own, unless `compile` is False."""
    return [
        sys.executable,
        "-m",
        "llmserve_ref.cli",
        "serve",
        "--model",
        MODEL_NAME,
        "--port",
        str(port),
        *(["--compile"] if compile else []),
        *speculating(speculative_config),
        *knobs(block_size, kv_cache_memory_bytes),
    ]


@contextlib.contextmanager
def our_server(
    log_dir: Path,
    *,
    kv_cache_memory_bytes: int,
    block_size: int,
    speculative_config: dict | None = None,
    compile: bool = True,
    timeout: float = 900.0,
) -> Iterator[Server]:
    """``llmserve-ref serve`` (the batched engine) with vLLM's flags, while the block runs;
    "llmserve-ref eager" without ``--compile`` (the engine as it ran before it compiled).

    Port 0 lets it pick a free port; it announces the URL on a line of its own. Compiling
    takes seconds with torch's compile cache warm, minutes cold (hence the timeout): 397 s
    for a graph per decode batch size and one for any other step on a two-core AMD EPYC with
    AVX2 only (before the second graph: about 100 s with AVX-512, 270 s with AVX2 only).
    """
    command = our_command(0, block_size, kv_cache_memory_bytes, speculative_config, compile)
    name = named("llmserve-ref", speculative_config) + ("" if compile else " eager")
    started = time.monotonic()
    log = log_dir / f"{name.replace(' ', '-')}.log"
    server = start(name, command, log, dict(os.environ))
    try:
        while not server.url:
            if match := ANNOUNCED.search(server.log_text()):
                server.url = match[1]
            elif server.process.poll() is not None or time.monotonic() > started + timeout:
                wait_healthy(server, 0, started)  # raises, with the log's tail
            else:
                time.sleep(0.2)
        wait_healthy(server, timeout, started)
        yield server
    finally:
        stop(server)


# llama.cpp's server: as many slots as the others' --max-num-seqs, each with the others'
# --max-model-len, so its KV cache (float32, as the others') holds as many tokens: 64 MiB;
# and the compute threads the others take: all cores but one, left to the HTTP side (vLLM's
# CPU worker binds its OpenMP threads so, and our core sets torch's threads so).
LLAMA_CPP_SLOTS = MAX_NUM_SEQS
LLAMA_CPP_THREADS = core_threads()


def llama_cpp_command(binary: Path, gguf_path: Path, port: int) -> list[str]:
    """llama.cpp's `llama-server` on our GGUF file, its knobs pinned to the others' values."""
    return [
        str(binary),
        "--model",
        str(gguf_path),
        "--alias",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--parallel",
        str(LLAMA_CPP_SLOTS),
        "--ctx-size",  # shared out among the slots: MAX_MODEL_LEN each
        str(LLAMA_CPP_SLOTS * MAX_MODEL_LEN),
        "--no-kv-unified",  # each slot its own MAX_MODEL_LEN cells, none borrowed
        "--cont-batching",
        "--cache-prompt",  # each slot reuses its KV for a prompt that starts the same way
        "--cache-ram",
        "0",  # and no host-memory cache of prompts beside it (8 GiB by default)
        "--cache-type-k",
        "f32",  # its default is f16
        "--cache-type-v",
        "f32",
        "--threads",
        str(LLAMA_CPP_THREADS),
        "--threads-batch",
        str(LLAMA_CPP_THREADS),
        "--jinja",  # the chat template stored in the file
        "--no-webui",
    ]


@contextlib.contextmanager
def llama_cpp_server(model_dir: Path, log_dir: Path, timeout: float = 120.0) -> Iterator[Server]:
    """Export `model_dir` to GGUF (`llmserve_ref.model.gguf_export`) and serve it with
    `llama-server` (the binary $LLAMA_SERVER names) while the block runs."""
    gguf_path = log_dir / "tiny.gguf"
    export(gguf_path, model_dir)
    port = free_port()
    command = llama_cpp_command(Path(os.environ[LLAMA_SERVER]), gguf_path, port)
    log, env = log_dir / "llama.cpp.log", dict(os.environ)
    with launched("llama.cpp", command, log, env, port, timeout) as server:
        yield server


# --- Servers started around a whole run (with_servers.py), found through the environment ---

# What the pages read (docs/stage-9/running-a-serving-engine.md; the ngram and draft pairs,
# docs/stage-6/speculative-decoding.md), and the tests too.
ENV = {
    "vLLM": ("VLLM_BASE_URL", "VLLM_LOG"),
    "llmserve-ref": ("LLMSERVE_BASE_URL", "LLMSERVE_LOG"),
    "llmserve-ref eager": ("LLMSERVE_EAGER_BASE_URL", "LLMSERVE_EAGER_LOG"),
    "llama.cpp": ("LLAMA_CPP_BASE_URL", "LLAMA_CPP_LOG"),
    "vLLM ngram": ("VLLM_NGRAM_BASE_URL", "VLLM_NGRAM_LOG"),
    "llmserve-ref ngram": ("LLMSERVE_NGRAM_BASE_URL", "LLMSERVE_NGRAM_LOG"),
    "vLLM draft": ("VLLM_DRAFT_BASE_URL", "VLLM_DRAFT_LOG"),
    "llmserve-ref draft": ("LLMSERVE_DRAFT_BASE_URL", "LLMSERVE_DRAFT_LOG"),
}
ENGINES = "LLMSERVE_ENGINES"  # "1": the page's vLLM blocks run (and fail without servers)


def page_env(*running: Server) -> dict[str, str]:
    """The environment that tells the page and the tests where `running` servers are."""
    env = {ENGINES: "1"}
    for server in running:
        url_var, log_var = ENV[server.name]
        env[url_var], env[log_var] = server.base_url, str(server.log)
    return env


def running(name: str) -> Server | None:
    """The server `name` that with_servers.py started around this run, or None if none was."""
    url_var, log_var = ENV[name]
    if os.environ.get(ENGINES) != "1" or url_var not in os.environ:
        return None
    server = Server(name, None, Path(os.environ[log_var]), os.environ[url_var].removesuffix("/v1"))
    wait_healthy(server, 10, time.monotonic())  # it must be up: never silently start another
    return server
