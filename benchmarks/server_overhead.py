"""What the HTTP server costs: tokens per second through it against the engine called directly.

    python benchmarks/server_overhead.py [--num-requests 32] [--output-len 32]

One `LoopEngine` serves the tiny model. The same requests (the benchmark client's
prompts, greedy decoding, so both paths generate the same tokens) run twice at
each concurrency, in a closed loop:

1. **direct**: asyncio tasks submit `EngineRequest`s and read the token streams,
   in this process, with no HTTP;
2. **HTTP**: `llmserve_ref.bench_client` streams them from the OpenAI server
   (`llmserve_ref.server.serve_in_thread`) in front of that same engine.

The table gives the output tokens of each path (direct / HTTP: equal when the
same tokens were generated), output tokens per second of each, and their
ratio: what JSON, SSE, HTTP and
the client's parsing take away. Both run in one process, so the client's work
competes with the engine's for the interpreter, as it would on a machine that
runs both. Each path gets warm-up requests first; the two paths alternate,
`--repeats` times, and the medians are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np

from llmserve_ref.bench_client import BenchConfig, make_prompt, request_specs, run
from llmserve_ref.engine import EngineRequest, LoopEngine
from llmserve_ref.sampling import SamplingParams
from llmserve_ref.server import serve_in_thread
from llmserve_ref.workload import Fixed

GREEDY = {"temperature": 0.0}


def prompts(config: BenchConfig) -> list[tuple[str, int]]:
    """The (prompt, max_tokens) pairs the benchmark client sends for `config`, in order."""
    rng = np.random.default_rng(config.seed)
    return [(make_prompt(s.prompt_len, rng), s.output_len) for s in request_specs(config)]


async def direct(
    engine: LoopEngine, work: list[tuple[str, int]], concurrency: int
) -> tuple[int, float]:
    """Output tokens, and tokens per second, with `concurrency` tasks calling the engine."""
    queue = iter(work)
    tokens = 0

    async def user() -> None:
        nonlocal tokens
        for prompt, max_tokens in queue:
            ids = engine.tokenizer.encode(prompt, add_bos=True)
            request = EngineRequest(ids, SamplingParams(**GREEDY), max_tokens)
            async for event in engine.submit(request):
                tokens += event.token_id is not None

    start = time.perf_counter()
    await asyncio.gather(*(user() for _ in range(concurrency)))
    return tokens, tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--repeats", type=int, default=3, help="median of this many runs each")
    args = parser.parse_args()
    engine = LoopEngine.load("tiny")
    print(f"{args.num_requests} requests, {args.prompt_len} prompt tokens, up to "
          f"{args.output_len} output tokens, greedy, device {engine.model.device}")
    print(f"{'concurrency':>11} {'tokens':>13} {'direct tok/s':>13} {'HTTP tok/s':>11} "
          f"{'HTTP / direct':>14}")
    with serve_in_thread("tiny", engine=engine) as server:
        for concurrency in args.concurrency:
            config = BenchConfig(server.url, concurrency=concurrency,
                                 num_requests=args.num_requests,
                                 prompt_len=Fixed(args.prompt_len),
                                 output_len=Fixed(args.output_len),
                                 warmup=concurrency, extra_body=GREEDY)
            work = prompts(config)
            asyncio.run(direct(engine, work[:concurrency], concurrency))  # warm-up
            direct_rates, http_rates = [], []
            for _ in range(args.repeats):  # interleaved, so a slow spell hits both paths
                tokens, rate = asyncio.run(direct(engine, work, concurrency))
                direct_rates.append(rate)
                http = run(config).summary()
                http_rates.append(http.output_throughput)
            d, h = float(np.median(direct_rates)), float(np.median(http_rates))
            counts = f"{tokens} / {http.output_tokens}"
            print(f"{concurrency:>11} {counts:>13} {d:>13.1f} {h:>11.1f} {h / d:>14.2f}")
    engine.close()


if __name__ == "__main__":
    main()
