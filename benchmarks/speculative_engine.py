"""The batched engine with prompt lookup (vLLM's ``ngram``) against itself without, side by side.

    python benchmarks/speculative_engine.py [--concurrency 1 4 16 64] [--runs 3]

Two `BatchedEngine`s, each with its core in its own process, one guessing
(``{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
"prompt_lookup_max": 4}``) and one not, measured one at a time, alternating (A B B A ...)
at each load, on two workloads, greedy, ``ignore_eos``, a closed loop of C users:

* **random**: vLLM's ``bench serve --dataset-name random`` shape, 32 prompt tokens of
  held-out story text (a different slice each), 32 output tokens: little for lookup to
  find;
* **retell**: `retell_prompts`, a story's first 59 tokens, then its first 12 again, 48
  output tokens: the answer retells the story, so lookup can guess.

Per cell: output tokens/s (min-median-max over the runs), the median time per output token
of the median run, and for the guessing engine its acceptance rate (accepted / draft
tokens, as vLLM's metrics give it) and tokens per draft; then the ratios of medians. A
benchmark reports; it never fails on a ratio: this machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

import numpy as np

from llmserve_ref.bench.prompts import make_prompt, retell_prompts
from llmserve_ref.engine.batched_engine import BatchedEngine
from llmserve_ref.engine.engine_config import EngineConfig
from llmserve_ref.engine.interface import Engine, EngineRequest
from llmserve_ref.engine.speculative_config import SpeculativeConfig
from llmserve_ref.model.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
LOOKUP = SpeculativeConfig.from_dict(
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
     "prompt_lookup_max": 4}
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    tokens_per_s: float
    tpot_ms: float  # median over requests of (last token - first token) / (tokens - 1)


def random_work(engine: Engine, count: int, seed: int) -> tuple[list[list[int]], int]:
    rng = np.random.default_rng(seed)
    return [engine.tokenizer.encode(make_prompt(32, rng)) for _ in range(count)], 32


def retell_work(engine: Engine, count: int, seed: int) -> tuple[list[list[int]], int]:
    encode = engine.tokenizer.encode
    return [encode(text, add_bos=True) for text in retell_prompts(count, seed)], 48


async def closed_loop(engine: Engine, work: list[list[int]], users: int, max_tokens: int) -> Run:
    queue, tokens, tpots = iter(work), 0, []

    async def user() -> None:
        nonlocal tokens
        for ids in queue:
            times = []
            request = EngineRequest(ids, GREEDY, max_tokens, ignore_eos=True)
            async for event in engine.submit(request):
                if event.token_id is not None:
                    times.append(time.perf_counter())
            tokens += len(times)
            tpots.append((times[-1] - times[0]) / (len(times) - 1))

    start = time.perf_counter()
    await asyncio.gather(*(user() for _ in range(users)))
    return Run(tokens / (time.perf_counter() - start), statistics.median(tpots) * 1e3)


def spread(values: list[float]) -> str:
    return f"{min(values):.0f}-{statistics.median(values):.0f}-{max(values):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests-per-user", type=int, default=4)
    args = parser.parse_args()
    engines = {
        "plain": BatchedEngine.load("tiny"),
        "ngram": BatchedEngine.load("tiny", config=EngineConfig(speculative_config=LOOKUP)),
    }
    workloads = {"random": random_work, "retell": retell_work}
    print(f"speculative config: {LOOKUP}; greedy, ignore_eos, closed loop")
    for engine in engines.values():  # warm-up
        work, n = retell_work(engine, 8, seed=0)
        asyncio.run(closed_loop(engine, work, 4, n))
    seed = 1
    for name, make in workloads.items():
        print(f"\nworkload {name}")
        header = (
            f"{'users':>5} | {'plain tok/s':>15} {'TPOT ms':>7} | {'ngram tok/s':>15} "
            f"{'TPOT ms':>7} {'accept':>6} {'tok/draft':>9} | speedup tok/s, TPOT"
        )
        print(header)
        for users in args.concurrency:
            runs: dict[str, list[Run]] = {"plain": [], "ngram": []}
            before = engines["ngram"].stats().spec_decoding
            for r in range(args.runs):
                work, max_tokens = make(
                    engines["plain"], max(8, users * args.requests_per_user), seed
                )
                seed += 1  # fresh prompts every run: no prefix cache carries over
                order = ["plain", "ngram"] if r % 2 == 0 else ["ngram", "plain"]
                for key in order:
                    runs[key].append(
                        asyncio.run(closed_loop(engines[key], work, users, max_tokens))
                    )
            after = engines["ngram"].stats().spec_decoding
            drafts = after.num_drafts - before.num_drafts
            drafted = after.num_draft_tokens - before.num_draft_tokens
            accepted = after.num_accepted_tokens - before.num_accepted_tokens
            plain, ngram = ([x.tokens_per_s for x in runs[k]] for k in ("plain", "ngram"))
            tpot = {k: statistics.median(x.tpot_ms for x in runs[k]) for k in runs}
            print(
                f"{users:>5} | {spread(plain):>15} {tpot['plain']:7.2f} | {spread(ngram):>15} "
                f"{tpot['ngram']:7.2f} {accepted / max(drafted, 1):6.0%} "
                f"{1 + accepted / max(drafts, 1):9.2f} | "
                f"{statistics.median(ngram) / statistics.median(plain):4.2f}x "
                f"{tpot['plain'] / tpot['ngram']:4.2f}x"
            )
    for engine in engines.values():
        engine.close()


if __name__ == "__main__":
    main()
