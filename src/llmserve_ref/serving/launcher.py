"""The launcher: an engine, the app in front of it, the transport under it, started.

This is the one module that names concrete engines: ``llmserve-ref serve`` runs a
`BatchedEngine` (continuous batching on paged KV, its core in a process of its own) or,
with ``--engine loop``, the first `LoopEngine`; the rest of the serving layer sees only
the `Engine` interface. `serve` runs until SIGINT or SIGTERM; `serve_in_thread` runs the
same server on a thread of this process, on a free port, for tests and pages:

>>> from openai import OpenAI
>>> with serve_in_thread("tiny", port=0) as server:
...     client = OpenAI(base_url=server.base_url, api_key="none")
...     reply = client.completions.create(model="tiny", prompt="Once upon a time,",
...                                       max_tokens=6, temperature=0)
>>> reply.choices[0].text, reply.usage.completion_tokens
(' there was a...', 6)
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.engine.engine_config import EngineConfig
from llmserve_ref.engine.interface import Engine
from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.engine.malloc_tuning import keep_freed_memory
from llmserve_ref.serving.app import Access, create_app
from llmserve_ref.serving.limits import Limits
from llmserve_ref.serving.metrics import ServerMetrics
from llmserve_ref.serving.transport import (
    GracefulServer,
    bind,
    run_in_thread,
    url_of,
    uvicorn_config,
)

# The line `serve` prints once it listens, and what a script that starts it reads the URL by.
ANNOUNCED = re.compile(r"llmserve-ref: serving \S+ at (http://\S+)/v1")


def load_engine(
    model: str = "tiny", kind: str = "batched", config: EngineConfig | None = None
) -> Engine:
    """The engine ``llmserve-ref serve`` runs: "batched" (the default) or "loop" (the baseline)."""
    if kind == "loop":
        return LoopEngine.load(model)
    if kind != "batched":
        raise ValueError(f"engine is 'batched' or 'loop', got {kind!r}")
    return BatchedEngine.load(model, config=config)


def kv_cache_report(engine: BatchedEngine) -> str:
    """What vLLM logs at startup: the KV cache's size, and how many longest requests fit."""
    tokens = engine.num_blocks * engine.config.block_size
    mib = engine.num_blocks * engine.bytes_per_block / 2**20
    return (
        f"KV cache: {engine.num_blocks} blocks of {engine.config.block_size} tokens "
        f"({tokens:,} tokens, {mib:.1f} MiB); maximum concurrency for {engine.max_model_len} "
        f"tokens per request: {tokens / engine.max_model_len:.1f}x"
    )


def exposure_warning(host: str, access: Access) -> str | None:
    """What to warn about when the server listens beyond this machine without a key.

    >>> exposure_warning("127.0.0.1", Access()) is None, exposure_warning("::1", Access()) is None
    (True, True)
    >>> exposure_warning("0.0.0.0", Access(api_key="k")) is None
    True
    >>> print(exposure_warning("0.0.0.0", Access()))
    listening on 0.0.0.0 without an API key: anyone who can reach it can generate. Set ...
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback or access.api_key is not None:
        return None
    return (
        f"listening on {host} without an API key: anyone who can reach it can generate. "
        "Set --api-key or LLMSERVE_API_KEY."
    )


def serve(
    model: str = "tiny",
    host: str = "127.0.0.1",
    port: int = 8000,
    shutdown_grace: float = 5.0,
    log_level: str = "info",
    engine: str = "batched",
    engine_config: EngineConfig | None = None,
    limits: Limits | None = None,
    access: Access | None = None,
) -> None:
    """Serve `model` until SIGINT or SIGTERM (what ``llmserve-ref serve`` runs)."""
    limits, access = limits or Limits(), access or Access()
    keep_freed_memory()  # this process's; the engine core's process sets its own
    warning = exposure_warning(host, access)
    if warning:
        print(f"llmserve-ref: WARNING: {warning}", file=sys.stderr, flush=True)
    running = load_engine(model, engine, engine_config)
    if isinstance(running, BatchedEngine):
        print(f"llmserve-ref: {kv_cache_report(running)}", flush=True)
        if running.compile_seconds is not None:
            print(
                f"llmserve-ref: compiled the forward for decode batch sizes "
                f"{running.config.compile_sizes} and for any other step in "
                f"{running.compile_seconds:.1f} s",
                flush=True,
            )
    sock = bind(host, port)
    app = create_app(running, model, limits, access)
    config = uvicorn_config(app, limits.header_timeout_s, shutdown_grace, log_level)
    announce = f"llmserve-ref: serving {model} at {url_of(sock)}/v1"
    try:
        server = GracefulServer(config, lambda: running.drain(shutdown_grace), announce)
        server.run(sockets=[sock])
    finally:
        sock.close()
        running.close()


@dataclass
class RunningServer:
    """A server running in this process: where it listens, its engine and its metrics."""

    url: str  # http://127.0.0.1:PORT, for /health and /metrics
    engine: Engine
    metrics: ServerMetrics

    @property
    def base_url(self) -> str:
        """What OpenAI clients take as `base_url` (and `OPENAI_BASE_URL`)."""
        return f"{self.url}/v1"


@contextlib.contextmanager
def serve_in_thread(
    model: str = "tiny",
    host: str = "127.0.0.1",
    port: int = 0,
    engine: Engine | None = None,
    shutdown_grace: float = 5.0,
    limits: Limits | None = None,
    access: Access | None = None,
    http: str = "h11",
    loop: str = "asyncio",
) -> Iterator[RunningServer]:
    """Run the server on a thread of this process while the ``with`` block runs.

    Port 0 (the default) picks a free port. The engine is a `BatchedEngine` serving
    `model` unless one is passed in; leaving the block shuts the server down gracefully.
    `http` and `loop` pick uvicorn's HTTP protocol and event loop
    (`llmserve_ref.serving.transport.uvicorn_config`).
    """
    running = load_engine(model) if engine is None else engine
    limits = limits or Limits()
    app = create_app(running, model, limits, access)
    config = uvicorn_config(app, limits.header_timeout_s, shutdown_grace, "warning", http, loop)
    server = GracefulServer(config, lambda: running.drain(shutdown_grace))
    try:
        with run_in_thread(server, host, port) as url:
            yield RunningServer(url, running, app.api.metrics)
    finally:
        if engine is None:
            running.close()
