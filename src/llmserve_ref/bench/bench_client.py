"""A benchmark client for OpenAI-compatible streaming endpoints: load, timelines, report.

It sends streamed requests to ``/v1/completions`` (backend ``openai``) or
``/v1/chat/completions`` (``openai-chat``), in the load shapes of `vllm bench serve`,
set by the same two knobs:

- `request_rate` (requests/s): requests are due at the times of a gamma renewal
  process (Poisson for ``burstiness=1``, from `llmserve_ref.planning.workload`) and
  are sent on schedule whether or not earlier ones have finished: an **open loop**.
  The default, ``inf``, makes every request due at once.
- `max_concurrency`: at most this many requests in flight; the others wait in the
  client for a free slot. With no request rate (``inf``) this is a **closed loop** of
  that many users, each sending its next request when its previous one finished: the
  server's speed sets the pace.

Each request records when it was due, when it was sent and when each chunk with
text arrived; `llmserve_ref.bench.bench_metrics` turns those timelines into TTFT, TPOT,
ITL, throughput and goodput. Token counts come from the usage chunk the client
asks for (``stream_options: {"include_usage": true}``): a chunk may carry
several tokens or none, so counting chunks is wrong.

It uses `httpx` and parses the Server-Sent Events itself rather than using the
`openai` client (which is built on httpx too): every ``data:`` line is
timestamped the moment it is read, nothing is validated into objects on the way,
and fields a server adds (such as llama.cpp's ``timings``) stay visible.

Prompts are slices of the project's held-out stories, cut to an exact number of
tokens of the tiny models' tokenizer (`llmserve_ref.bench.prompts`), like the random
prompts of `vllm bench serve --dataset-name random`; against another model the counts
are close, and the usage chunk reports the true ones. ``ignore_eos: true`` asks the
server not to stop at its end token (vLLM, SGLang and llama.cpp honour it), on by
default as vLLM's random dataset turns it on; a server that stops early anyway returns
fewer tokens than `max_tokens`, which the summary counts as "stopped before max_tokens".

The command ``llmserve-ref bench`` (its flags and its report) is
`llmserve_ref.bench.bench_cli`; the result file it saves is
`llmserve_ref.bench.bench_result`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import httpx
import numpy as np

from llmserve_ref.bench.bench_metrics import (
    PERCENTILES,
    Origin,
    RequestRecord,
    Summary,
    summarize,
)
from llmserve_ref.bench.prompts import make_prompt
from llmserve_ref.planning.slo import SLO
from llmserve_ref.planning.workload import (
    Fixed,
    Lengths,
    RequestSpec,
    sample_workload,
)


@dataclass(frozen=True)
class BenchConfig:
    """What to send, where, and in which load shape, named as `vllm bench serve` names it.

    `request_rate` (default ``inf``: all at once) and `max_concurrency` set the load;
    both of them unset is every request at once, `max_concurrency` alone a closed loop
    of that many users. The run ends after `num_prompts` requests or, if `duration` is
    set, once no new request is due before `duration` seconds (in-flight ones finish).
    The `num_warmups` requests go first, all at once, and are not recorded. `model`
    None is the first model the server lists. `extra_body` is merged into every
    request (sampling parameters such as ``temperature`` go there, as in vLLM).

    >>> BenchConfig("http://127.0.0.1:8000", backend="openai-chat").path
    '/v1/chat/completions'
    """

    base_url: str
    backend: Literal["openai", "openai-chat"] = "openai"
    endpoint: str | None = None  # the API path; None: the backend's usual one
    model: str | None = None
    num_prompts: int | None = 100
    duration: float | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    num_warmups: int = 0
    input_len: Lengths = field(default_factory=lambda: Fixed(32))
    output_len: Lengths = field(default_factory=lambda: Fixed(32))
    ignore_eos: bool = True
    seed: int = 0
    timeout: float = 60.0
    api_key: str | None = None
    extra_body: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.request_rate > 0:
            raise ValueError(f"request_rate must be positive, not {self.request_rate}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be greater than 0")
        if self.num_prompts is None and self.duration is None:
            raise ValueError("give num_prompts, duration, or both")
        if self.num_prompts is None and self.users is None and math.isinf(self.request_rate):
            raise ValueError("an infinite request rate sends everything at once: give num_prompts")
        suffix = "chat/completions" if self.backend == "openai-chat" else "completions"
        if not self.path.endswith(suffix):
            raise ValueError(f"the {self.backend} backend's endpoint must end with {suffix}")

    @property
    def path(self) -> str:
        """The API path requests go to."""
        default = "/v1/chat/completions" if self.backend == "openai-chat" else "/v1/completions"
        return self.endpoint or default

    @property
    def users(self) -> int | None:
        """The closed loop's number of users: `max_concurrency` without a request rate."""
        return self.max_concurrency if math.isinf(self.request_rate) else None


def request_specs(config: BenchConfig) -> Iterator[RequestSpec]:
    """The run's requests in order, as many as asked (unbounded in duration mode)."""
    rate = config.request_rate
    offset, block = 0.0, 0
    while True:
        batch = sample_workload(
            1024,
            rate,
            config.input_len,
            config.output_len,
            burstiness=config.burstiness,
            seed=config.seed + block,
        )
        for spec in batch:
            index = block * 1024 + int(spec.request_id)
            if config.num_prompts is not None and index >= config.num_prompts:
                return
            arrival = offset + spec.arrival_time
            if config.duration is not None and arrival > config.duration:
                return
            yield RequestSpec(str(index), arrival, spec.prompt_len, spec.output_len)
        offset += batch[-1].arrival_time if math.isfinite(rate) else 0.0
        block += 1


def _payload(config: BenchConfig, prompt: str, max_tokens: int) -> dict:
    body: dict = {
        "model": config.model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if config.backend == "openai-chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if config.ignore_eos:
        body["ignore_eos"] = True
    return {**body, **config.extra_body}


# --8<-- [start:request]
async def _events(response: httpx.Response) -> AsyncIterator[tuple[float, dict]]:
    """(arrival time, parsed JSON) of each ``data:`` event, until ``[DONE]``."""
    async for line in response.aiter_lines():
        now = time.perf_counter()
        if not line.startswith("data:"):
            continue  # blank separators, comments (": ping"), event names
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        yield now, json.loads(data)


def _text(event: dict) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    return (choice.get("delta") or {}).get("content") or choice.get("text") or ""


async def send_request(
    client: httpx.AsyncClient,
    config: BenchConfig,
    spec: RequestSpec,
    prompt: str,
    t0: float,
    scheduled: float,
) -> RequestRecord:
    """Send one streamed request and record its timeline (seconds since `t0`).

    Only chunks with text count as token arrivals: a chat stream's opening chunk,
    which names the role and carries no text, and the usage chunk do not.
    Failures are recorded with their message, never raised.
    """
    record = RequestRecord(
        int(spec.request_id),
        scheduled,
        time.perf_counter() - t0,
        prompt_tokens=spec.prompt_len,  # until the usage chunk says otherwise
        max_tokens=spec.output_len,
        usage_reported=False,
    )
    try:
        payload = _payload(config, prompt, spec.output_len)
        async with client.stream("POST", config.path, json=payload) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                record.error = f"HTTP {response.status_code}: {body[:200]}"
                return record
            async for now, event in _events(response):
                if "error" in event:
                    record.error = str(event["error"].get("message", event["error"]))
                    return record
                if _text(event):
                    record.chunk_times.append(now - t0)
                if usage := event.get("usage"):
                    record.output_tokens = usage["completion_tokens"]
                    record.prompt_tokens = usage["prompt_tokens"]
                    record.usage_reported = True
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as error:
        record.error = f"{type(error).__name__}: {error}"
        return record
    if not record.usage_reported:
        record.output_tokens = len(record.chunk_times)
    if not record.chunk_times:
        record.error = "no content in the response"
    return record


# --8<-- [end:request]


# Send one request (its spec, its prompt, when it was due) and record it.
Send = Callable[[RequestSpec, str, float], Awaitable[RequestRecord]]


def prompted_specs(config: BenchConfig) -> Iterator[tuple[RequestSpec, str]]:
    """The run's requests in order, each with its prompt, drawn from `seed`."""
    rng = np.random.default_rng(config.seed)
    return ((spec, make_prompt(spec.prompt_len, rng)) for spec in request_specs(config))


def warmup_requests(config: BenchConfig) -> list[tuple[RequestSpec, str]]:
    """The `num_warmups` requests: short, with prompts of their own seed, never recorded."""
    rng = np.random.default_rng([config.seed, 1])
    count = config.num_warmups
    return [(RequestSpec(f"{i}", 0.0, 16, 8), make_prompt(16, rng)) for i in range(count)]


async def first_model(client: httpx.AsyncClient) -> str:
    """The first model the server lists at ``/v1/models``: what `vllm bench serve`
    benchmarks when it is given no ``--model``."""
    response = await client.get("/v1/models")
    response.raise_for_status()
    return response.json()["data"][0]["id"]


def http_client(config: BenchConfig) -> httpx.AsyncClient:
    """An HTTP client for the server: no cap on connections (the load shape is the only
    limit), the API key if there is one, and `base_url` with or without its ``/v1``."""
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    root = config.base_url.rstrip("/").removesuffix("/v1")  # OpenAI clients' style works too
    return httpx.AsyncClient(base_url=root, headers=headers, limits=limits, timeout=config.timeout)


# --8<-- [start:run]
@dataclass
class BenchResult:
    """Every recorded request of a run, and how long the run took."""

    config: BenchConfig
    records: list[RequestRecord]
    duration: float

    def summary(
        self,
        slo: SLO | None = None,
        origin: Origin = "sent",
        percentiles: Sequence[float] = PERCENTILES,
    ) -> Summary:
        return summarize(self.records, self.duration, slo, origin, percentiles)


async def closed_loop(
    config: BenchConfig, specs: Iterator[tuple[RequestSpec, str]], send: Send, t0: float
) -> list[RequestRecord]:
    """`max_concurrency` users sharing one queue of requests, each sending its next
    request when its previous one finished (and none after `duration`), in request order."""

    async def user() -> list[RequestRecord]:
        mine = []
        for spec, prompt in specs:
            if config.duration is not None and time.perf_counter() - t0 > config.duration:
                break
            mine.append(await send(spec, prompt, time.perf_counter() - t0))
        return mine

    per_user = await asyncio.gather(*(user() for _ in range(config.users or 1)))
    return sorted((r for rs in per_user for r in rs), key=lambda r: r.index)


async def open_loop(
    config: BenchConfig, specs: Iterator[tuple[RequestSpec, str]], send: Send, t0: float
) -> list[RequestRecord]:
    """Each request sent when it is due, whether or not earlier ones have finished,
    unless `max_concurrency` holds it back in the client until a slot frees up."""
    gate = asyncio.Semaphore(config.max_concurrency) if config.max_concurrency else None

    async def due(spec: RequestSpec, prompt: str) -> RequestRecord:
        if gate is None:
            return await send(spec, prompt, spec.arrival_time)
        async with gate:
            return await send(spec, prompt, spec.arrival_time)

    tasks = []
    for spec, prompt in specs:
        await asyncio.sleep(max(0.0, t0 + spec.arrival_time - time.perf_counter()))
        tasks.append(asyncio.create_task(due(spec, prompt)))
    return list(await asyncio.gather(*tasks))


async def run_async(
    config: BenchConfig, on_response: Callable[[RequestRecord], object] | None = None
) -> BenchResult:
    """Run the benchmark on the current event loop: the warm-up, unrecorded, then the
    load, timed from when the warm-up has finished. `on_response` sees each recorded
    request as it ends (a progress bar counts them)."""
    async with http_client(config) as client:
        if config.model is None:
            config = dataclasses.replace(config, model=await first_model(client))
        warmup = warmup_requests(config)
        await asyncio.gather(
            *(send_request(client, config, s, p, time.perf_counter(), 0.0) for s, p in warmup)
        )
        t0 = time.perf_counter()

        async def send(spec: RequestSpec, prompt: str, scheduled: float) -> RequestRecord:
            record = await send_request(client, config, spec, prompt, t0, scheduled)
            if on_response:
                on_response(record)
            return record

        load = closed_loop if config.users else open_loop
        records = await load(config, prompted_specs(config), send, t0)
        duration = time.perf_counter() - t0
    return BenchResult(config, records, duration)


def run(
    config: BenchConfig, on_response: Callable[[RequestRecord], object] | None = None
) -> BenchResult:
    """Run the benchmark in a fresh event loop."""
    return asyncio.run(run_async(config, on_response))


# --8<-- [end:run]
