"""The batched, paged engine against the first engine and Hugging Face's `generate`, side by side.

    python benchmarks/engine.py [--concurrency 1 4 16 64] [--requests-per-user 4]

One workload throughout, vLLM's `bench serve --dataset-name random` shape: prompts of 32
tokens (slices of held-out stories, a different slice each, so no prefix cache helps),
32 output tokens with ``ignore_eos``, greedy, a closed loop of C users, each sending its
next request when the last one ends. For each C:

1. **in-process**: asyncio users submit to the engine directly: `BatchedEngine` (what
   ``llmserve-ref serve`` runs) and `LoopEngine` (the first engine: one forward pass per
   request per step). Hugging Face's `generate` on the same weights serves one request at
   a time, so it is measured once, at C = 1, and that is its throughput at any C.
2. **HTTP**: ``llmserve-ref bench`` (`llmserve_ref.bench.bench_client`) against
   ``llmserve-ref serve`` (the batched engine, on a thread of this process), on each of
   uvicorn's stacks in turn, one server at a time: h11 on asyncio's event loop (plain
   ``uvicorn``, what ``llmserve-ref serve`` runs) and httptools on uvloop
   (``uvicorn[standard]``, what vLLM and SGLang install).

Output tokens per second and the median time to first token, then the ratios the targets
are stated in. Real vLLM is measured beside our server by ``nox -s engines``, with vLLM's
own client; that session prints the vLLM ratios. A benchmark reports; it never fails on a
ratio: this machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import LlamaForCausalLM
from transformers.generation.streamers import BaseStreamer
from transformers.utils import logging as hf_logging

from llmserve_ref.bench.bench_client import BenchConfig, run
from llmserve_ref.bench.prompts import make_prompt
from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.engine.interface import Engine, EngineRequest
from llmserve_ref.engine.loop_engine import LoopEngine
from llmserve_ref.model.sampling import SamplingParams
from llmserve_ref.model.weights import TARGET_DIR
from llmserve_ref.planning.workload import Fixed
from llmserve_ref.serving.launcher import serve_in_thread

PROMPT_LEN = OUTPUT_LEN = 32
GREEDY = SamplingParams(temperature=0)


@dataclass(frozen=True)
class Measured:
    tokens_per_s: float
    ttft_ms: float  # median


def prompts(engine: Engine, count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [engine.tokenizer.encode(make_prompt(PROMPT_LEN, rng)) for _ in range(count)]


async def closed_loop(engine: Engine, work: list[list[int]], users: int) -> Measured:
    """`users` tasks share `work`; each submits a request and reads its stream to the end."""
    queue, tokens, ttfts = iter(work), 0, []

    async def user() -> None:
        nonlocal tokens
        for ids in queue:
            start, first = time.perf_counter(), None
            request = EngineRequest(ids, GREEDY, OUTPUT_LEN, ignore_eos=True)
            async for event in engine.submit(request):
                if event.token_id is not None:
                    tokens += 1
                    first = first or time.perf_counter() - start
            ttfts.append(first)

    start = time.perf_counter()
    await asyncio.gather(*(user() for _ in range(users)))
    return Measured(tokens / (time.perf_counter() - start), statistics.median(ttfts) * 1e3)


class FirstToken(BaseStreamer):
    """Notes when `generate` hands over its first new token (its first `put` is the prompt)."""

    def __init__(self) -> None:
        self.puts, self.at = 0, None

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


def hf_generate(work: list[list[int]]) -> Measured:
    """Hugging Face `generate`, one request at a time (it does not batch arrivals)."""
    hf_logging.disable_progress_bar()
    model = LlamaForCausalLM.from_pretrained(TARGET_DIR, dtype=torch.float32).eval()
    tokens, ttfts, start = 0, [], time.perf_counter()
    for ids in work:
        first, t0 = FirstToken(), time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids]),
                max_new_tokens=OUTPUT_LEN,
                min_new_tokens=OUTPUT_LEN,
                do_sample=False,
                streamer=first,
                pad_token_id=model.config.eos_token_id,
            )
        ttfts.append(first.at - t0)
        tokens += out.shape[1] - len(ids)
    return Measured(tokens / (time.perf_counter() - start), statistics.median(ttfts) * 1e3)


# uvicorn's HTTP protocol and event loop: plain uvicorn's, and uvicorn[standard]'s.
STACKS = {"h11/asyncio": ("h11", "asyncio"), "httptools/uvloop": ("httptools", "uvloop")}


def http(url: str, users: int, requests: int) -> Measured:
    config = BenchConfig(
        url,
        max_concurrency=users,
        num_prompts=requests,
        num_warmups=min(users, 4),
        input_len=Fixed(PROMPT_LEN),
        output_len=Fixed(OUTPUT_LEN),
        ignore_eos=True,
        extra_body={"temperature": 0.0},
    )
    s = run(config).summary()
    assert s.failed == 0 and s.total_output_tokens == requests * OUTPUT_LEN, s
    return Measured(s.output_throughput, s.ttft.median * 1e3)


def verdict(name: str, value: float, target: float) -> str:
    return f"  {name}: {value:.2f}x (target >= {target}x) {'met' if value >= target else 'NOT met'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--requests-per-user", type=int, default=4)
    args = parser.parse_args()
    batched, loop = BatchedEngine.load("tiny"), LoopEngine.load("tiny")
    print(
        f"prompts of {PROMPT_LEN} tokens, {OUTPUT_LEN} output tokens (ignore_eos), greedy, "
        f"closed loop; device {loop.model.device}; the batched engine's core in its own "
        f"process, LoopEngine and HF generate with {torch.get_num_threads()} torch threads"
    )
    hf = hf_generate(prompts(batched, 8, seed=1))
    rows: dict[int, dict[str, Measured]] = {}
    with contextlib.ExitStack() as servers:  # both listen; one is measured at a time
        urls = {
            stack: servers.enter_context(
                serve_in_thread("tiny", engine=batched, http=protocol, loop=event_loop)
            ).url
            for stack, (protocol, event_loop) in STACKS.items()
        }
        asyncio.run(closed_loop(batched, prompts(batched, 8, seed=2), 4))  # warm-up
        asyncio.run(closed_loop(loop, prompts(loop, 4, seed=2), 4))
        for url in urls.values():
            http(url, 4, 8)
        for users in args.concurrency:
            requests = max(8, users * args.requests_per_user)
            work = prompts(batched, requests, seed=users)
            rows[users] = {
                "batched": asyncio.run(closed_loop(batched, work, users)),
                "loop": asyncio.run(closed_loop(loop, work, users)),
                **{stack: http(url, users, requests) for stack, url in urls.items()},
            }
    loop.close()
    columns = ["batched", "LoopEngine", "HF generate", *(f"HTTP {s}" for s in STACKS)]
    print(f"{'users':>5} | " + " | ".join(f"{c:>17}" for c in columns))
    print(f"{'':>5} | " + " | ".join([f"{'tok/s':>8} {'TTFT ms':>8}"] * len(columns)))
    for users, r in rows.items():
        cells = [r["batched"], r["loop"], hf, *(r[s] for s in STACKS)]
        print(
            f"{users:>5} | " + " | ".join(f"{m.tokens_per_s:8.0f} {m.ttft_ms:8.1f}" for m in cells)
        )
    print("ratios, output tokens/s:")
    for users, r in rows.items():
        b = r["batched"].tokens_per_s
        print(
            f"  {users:>3} users: batched / LoopEngine {b / r['loop'].tokens_per_s:5.2f}x, "
            f"batched / HF generate {b / hf.tokens_per_s:5.2f}x, HTTP / in-process "
            + ", ".join(f"{s} {r[s].tokens_per_s / b:4.2f}x" for s in STACKS)
        )
    if 16 in rows:
        r = rows[16]
        print("targets at 16 users (vLLM's are checked by `nox -s engines`):")
        print(
            verdict("batched / LoopEngine", r["batched"].tokens_per_s / r["loop"].tokens_per_s, 5.0)
        )
        for stack in STACKS:
            ratio = r[stack].tokens_per_s / r["batched"].tokens_per_s
            print(verdict(f"HTTP ({stack}) / in-process", ratio, 0.9))


if __name__ == "__main__":
    main()
