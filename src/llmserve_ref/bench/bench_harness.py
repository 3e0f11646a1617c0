"""Benchmark several servers side by side: servers × loads × runs, fresh prompts every run.

A benchmark of two servers on one machine says something only as a comparison measured in
one session, and only if neither server is helped by what an earlier run left behind. So a
harness run measures every server at every load `runs` times, one server at a time (an idle
server beside a busy one costs it little, a busy one a lot), alternating servers at each
load, and gives every run a seed of its own: no run sends a prompt an earlier run sent, and
no prefix cache turns a repeated prompt into a cache hit. One at a time means after the last
run's work has stopped, too: a server may keep a core busy after its last reply (vLLM's
processes do, as the running-a-serving-engine page measures), so each run waits until the
machine is quiet (`wait_until_quiet`). Each point is reported as
min-median-max over its runs, beside the ratio of medians.

The client is a function, so that any benchmark client can drive it: `our_client` is this
project's (`llmserve_ref.bench.bench_client`); the engines page wraps `vllm bench serve`.
Both make their point from the result in vLLM's format (`llmserve_ref.bench.bench_result`),
read by one function, `Point.of`.

>>> from llmserve_ref.bench.fake_server import FakeConfig, serve_fake
>>> with serve_fake(FakeConfig(ttft=0.01, itl=0.002)) as url:
...     grid = run_grid({"a": url, "b": url}, our_client(num_prompts=lambda users: 4),
...                     users=(1, 2), runs=2)
>>> sorted(grid), [len(points) for points in grid.values()]
([('a', 1), ('a', 2), ('b', 1), ('b', 2)], [2, 2, 2, 2])
>>> len({p.seed for points in grid.values() for p in points})  # a seed per run
8
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from llmserve_ref.bench.bench_client import BenchConfig, run
from llmserve_ref.bench.bench_result import SavedResult, to_result
from llmserve_ref.planning.workload import Fixed


@dataclass(frozen=True)
class Point:
    """What one client measured in one run on one server."""

    seed: int
    completed: int
    failed: int
    output_lens: tuple[int, ...]  # per successful request, as the server's usage reported it
    output_throughput: float  # output tokens per second
    ttft_ms: float  # medians over the run's requests
    tpot_ms: float
    errors: tuple[str, ...] = ()  # the failed requests' messages, each once

    @classmethod
    def of(cls, seed: int, result: SavedResult) -> Point:
        """The point a result in vLLM's format gives (saved with its per-request details)."""
        return cls(
            seed,
            result.completed,
            result.failed,
            result.successful_output_lens(),
            result.output_throughput,
            result.latencies_ms["median_ttft_ms"] or 0.0,
            result.latencies_ms["median_tpot_ms"] or 0.0,
            tuple(dict.fromkeys(e for e in result.errors or () if e)),
        )


# (base URL, concurrent users, seed) -> one run's point
Client = Callable[[str, int, int], Point]


def busy_seconds() -> float:
    """CPU seconds all the machine's CPUs have spent running anything since it booted (user,
    nice, system, irq, softirq; not idle, waiting on I/O or stolen by the host), from Linux's
    /proc/stat."""
    with open("/proc/stat", encoding="ascii") as stat:
        user, nice, system, _, _, irq, softirq = map(int, stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def busy_cores(window: float) -> float | None:
    """How many cores, on average, every process together kept busy over the next `window`
    seconds; None where there is no /proc/stat."""
    if not os.path.exists("/proc/stat"):
        return None
    before = busy_seconds()
    time.sleep(window)
    return (busy_seconds() - before) / window


def wait_until_quiet(max_wait: float = 5.0, window: float = 0.1, cores: float = 0.3) -> float:
    """Wait until the machine kept fewer than `cores` busy over a `window`, or `max_wait`
    seconds passed (without /proc/stat, one window); the seconds waited."""
    start = time.monotonic()
    while (busy := busy_cores(window)) is not None and busy >= cores:
        if time.monotonic() - start >= max_wait:
            break
    if busy is None:
        time.sleep(window)
    return time.monotonic() - start


# --8<-- [start:grid]
def run_grid(
    servers: Mapping[str, str],
    client: Client,
    users: Sequence[int],
    runs: int = 3,
    seeds: Iterator[int] | None = None,
) -> dict[tuple[str, int], list[Point]]:
    """Every server at every load, `runs` times, each run with a seed no other run has.

    The order is repetition, then load, then server: each load is measured on every server
    before the next load starts, and every point's runs are spread over the whole session.
    Each run starts once the machine is quiet.
    Grids measured on the same servers share one `seeds` (an `itertools.count()`), so that
    no run of a later grid repeats the prompts of an earlier one.
    """
    seeds = seeds if seeds is not None else itertools.count(1)
    grid: dict[tuple[str, int], list[Point]] = {(s, u): [] for u in users for s in servers}
    for _ in range(runs):
        for concurrency in users:
            for name, base_url in servers.items():
                wait_until_quiet()  # the last run's server, and its client, have stopped
                grid[name, concurrency].append(client(base_url, concurrency, next(seeds)))
    return grid


# --8<-- [end:grid]


def harness_config(
    base_url: str,
    users: int,
    num_prompts: int,
    seed: int,
    input_len: int = 32,
    output_len: int = 32,
    num_warmups: int = 0,
) -> BenchConfig:
    """The harness's workload for `llmserve-ref bench`: a closed loop of `users`, prompts of
    `input_len` tokens, `output_len` tokens out with ``ignore_eos``, greedy."""
    return BenchConfig(
        base_url,
        max_concurrency=users,
        num_prompts=num_prompts,
        num_warmups=num_warmups,
        input_len=Fixed(input_len),
        output_len=Fixed(output_len),
        ignore_eos=True,
        seed=seed,
        extra_body={"temperature": 0},
    )


def our_client(
    num_prompts: Callable[[int], int] = lambda users: max(32, 4 * users),
    input_len: int = 32,
    output_len: int = 32,
    num_warmups: int = 2,
) -> Client:
    """`llmserve-ref bench` as a harness client: a closed loop, ``ignore_eos``, greedy."""

    def measure(base_url: str, users: int, seed: int) -> Point:
        config = harness_config(
            base_url, users, num_prompts(users), seed, input_len, output_len, num_warmups
        )
        result = run(config)
        document = to_result(result, result.summary(), detailed=True)
        return Point.of(seed, SavedResult.of(document))

    return measure


def spread(values: Sequence[float], digits: int = 0) -> str:
    """min-median-max, as the table prints it.

    >>> spread([3.0, 1.0, 2.0])
    '1-2-3'
    """
    low, mid, high = min(values), statistics.median(values), max(values)
    return "-".join(f"{v:.{digits}f}" for v in (low, mid, high))


def median_ratio(
    grid: Mapping[tuple[str, int], list[Point]], what: str, ours: str, theirs: str, users: int
) -> float:
    """median(`what` of `ours`) / median(`what` of `theirs`) at `users`."""
    mine = statistics.median(getattr(p, what) for p in grid[ours, users])
    other = statistics.median(getattr(p, what) for p in grid[theirs, users])
    return mine / other


def table(grid: Mapping[tuple[str, int], list[Point]], ours: str, peers: Sequence[str]) -> str:
    """Per load: each server's output tok/s, TTFT and TPOT as min-median-max, and on our row
    the ratio of medians ours/peer, one column per peer."""
    users = sorted({u for _, u in grid})
    ratios = tuple(f"ours/{peer} tok/s" for peer in peers)
    rows = [("users", "server", "output tok/s", "TTFT ms", "TPOT ms", *ratios)]
    for u in users:
        for name in (*peers, ours):
            points = grid[name, u]
            rows.append(
                (
                    str(u),
                    name,
                    spread([p.output_throughput for p in points]),
                    spread([p.ttft_ms for p in points], 1),
                    spread([p.tpot_ms for p in points], 2),
                    *(
                        f"{median_ratio(grid, 'output_throughput', ours, peer, u):.2f}"
                        if name == ours
                        else ""
                        for peer in peers
                    ),
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
