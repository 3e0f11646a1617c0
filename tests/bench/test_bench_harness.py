"""The benchmark harness: every server at every load, run after run, each run on fresh prompts."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

from llmserve_ref.bench.bench_client import BenchConfig, prompted_specs
from llmserve_ref.bench.bench_harness import (
    Point,
    busy_cores,
    median_ratio,
    run_grid,
    spread,
    table,
    wait_until_quiet,
)
from llmserve_ref.bench.bench_result import SavedResult


def point(seed: int, throughput: float) -> Point:
    return Point(seed, 4, 0, (32,) * 4, throughput, 10.0, 2.0)


def test_runs_alternate_servers_at_each_load_and_never_share_a_seed():
    calls = []

    def client(base_url: str, users: int, seed: int) -> Point:
        calls.append((base_url, users, seed))
        return point(seed, 100.0)

    grid = run_grid({"a": "A", "b": "B"}, client, users=(1, 8), runs=3)
    assert [(url, users) for url, users, _ in calls[:4]] == [("A", 1), ("B", 1), ("A", 8), ("B", 8)]
    assert calls[4:8] == [(u, n, s + 4) for u, n, s in calls[:4]]  # the next repetition
    seeds = [seed for _, _, seed in calls]
    assert len(seeds) == 12 == len(set(seeds))
    assert {key: len(points) for key, points in grid.items()} == dict.fromkeys(grid, 3)


def test_grids_that_share_their_seeds_never_repeat_a_run():
    """The engines page measures a grid, then each client once more on the same servers."""

    def client(base_url: str, users: int, seed: int) -> Point:
        return point(seed, 100.0)

    seeds = itertools.count(1)
    first = run_grid({"a": "A", "b": "B"}, client, users=(1, 8), runs=3, seeds=seeds)
    then = run_grid({"a": "A", "b": "B"}, client, users=(16,), runs=1, seeds=seeds)
    used = [p.seed for grid in (first, then) for points in grid.values() for p in points]
    assert sorted(used) == list(range(1, 15))
    alone = run_grid({"a": "A"}, client, users=(16,), runs=2)  # without: seeds from 1
    assert [p.seed for p in alone["a", 16]] == [1, 2]


def test_a_fresh_seed_is_a_fresh_set_of_prompts():
    """What makes the harness's runs fresh: our client's prompts depend on the seed."""
    config = BenchConfig("http://x", max_concurrency=1, num_prompts=8)
    prompts = [
        {text for _, text in prompted_specs(BenchConfig(**{**vars(config), "seed": seed}))}
        for seed in range(1, 13)
    ]
    assert all(len(p) == 8 for p in prompts)  # no prompt twice within a run
    assert all(a.isdisjoint(b) for i, a in enumerate(prompts) for b in prompts[i + 1 :])


def test_the_table_gives_min_median_max_and_the_ratio_of_medians():
    grid = {
        ("vLLM", 16): [point(1, 100.0), point(3, 300.0), point(5, 200.0)],
        ("llama.cpp", 16): [point(7, 50.0), point(8, 60.0), point(9, 75.0)],
        ("ours", 16): [point(2, 150.0), point(4, 100.0), point(6, 400.0)],
    }
    assert spread([p.output_throughput for p in grid["vLLM", 16]]) == "100-200-300"
    assert median_ratio(grid, "output_throughput", "ours", "vLLM", 16) == 0.75
    lines = table(grid, ours="ours", peers=("vLLM", "llama.cpp")).splitlines()
    assert lines[0].split()[-4:] == ["ours/vLLM", "tok/s", "ours/llama.cpp", "tok/s"]
    assert lines[1].split() == ["16", "vLLM", "100-200-300", "10.0-10.0-10.0", "2.00-2.00-2.00"]
    assert lines[2].split()[:3] == ["16", "llama.cpp", "50-60-75"]
    assert lines[3].split()[:3] == ["16", "ours", "100-150-400"]
    assert lines[3].split()[-2:] == ["0.75", "2.50"]  # 150 / 200 and 150 / 60


def test_a_point_reads_a_result_in_vllms_format():
    """What `vllm bench serve --save-detailed` returns: a failed request has length 0 and a
    message, a successful one its length and an empty message."""
    saved = SavedResult.of(
        {
            "duration": 2.0,
            "completed": 2,
            "failed": 1,
            "total_input_tokens": 64,
            "total_output_tokens": 64,
            "request_throughput": 1.0,
            "request_goodput": None,
            "output_throughput": 32.0,
            "total_token_throughput": 64.0,
            "median_ttft_ms": 12.5,
            "median_tpot_ms": 2.5,
            "output_lens": [32, 0, 32],
            "errors": ["", "Bad Request", ""],
        }
    )
    assert Point.of(7, saved) == Point(7, 2, 1, (32, 32), 32.0, 12.5, 2.5, ("Bad Request",))


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_a_run_waits_while_the_machine_is_busy_and_not_past_its_bound():
    """A thread spinning on a core, as vLLM's CPU worker does after a load: the harness
    waits its whole bound; then, the thread stopped, it counts the core busy no more."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        spinning = busy_cores(0.2)
        waited = wait_until_quiet(max_wait=0.5)
    finally:
        stop.set()
        spinner.join()
    assert 0.5 <= waited < 0.5 + 1.0
    assert spinning - busy_cores(0.2) > 0.5  # the spinning core, and only it, stopped
