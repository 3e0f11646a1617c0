"""`vllm bench serve` as a client of the benchmark harness (`llmserve_ref.bench.bench_harness`).

vLLM's benchmark command is the function ``vllm.benchmarks.serve.main``, which returns the
dictionary its ``--save-result`` writes. Called with the command's own flags, it measures a
server exactly as the command does, and `Point.of` reads its result as it reads ours. So
the engines pages measure every server with vLLM's own client, and nothing here counts a
token or times a request. It needs vLLM installed (``nox -s engines``); nothing else in
the package does, so it is imported only when a client is made.
"""

from __future__ import annotations

# --8<-- [start:client]
import contextlib
import io
import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from llmserve_ref.bench.bench_harness import Client, Point
from llmserve_ref.bench.bench_result import SavedResult

# (number of prompts, seed) -> the prompts' texts, sent as written
Prompts = Callable[[int, int], list[str]]


def vllm_client(
    tokenizer: Path,
    requests_at: Callable[[int], int],
    seeds: Iterator[int],
    *,
    output_len: int = 32,
    prompts: Prompts | None = None,
) -> Client:
    """`vllm bench serve` as a harness client: a closed loop of the harness's users,
    ``requests_at(users)`` requests of `output_len` tokens each, ``ignore_eos``, greedy.

    The prompts are vLLM's ``random`` dataset (32 random token ids, drawn from the seed), or,
    with `prompts`, its ``custom`` dataset: a JSONL file of the texts ``prompts(count, seed)``
    gives, sent as they are written (``--skip-chat-template``). A run in which requests
    failed is printed and run once more with the next of `seeds` (fresh prompts); a second
    failure stays in the point.
    """
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as vllm_bench_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def once(base_url: str, users: int, seed: int, folder: Path) -> Point:
        count = requests_at(users)
        if prompts is None:
            dataset = ["--dataset-name", "random", "--input-len", "32", "--output-len"]
        else:
            path = folder / f"prompts-{seed}.jsonl"
            lines = (json.dumps({"prompt": text}) for text in prompts(count, seed))
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            dataset = ["--dataset-name", "custom", "--dataset-path", str(path),
                       "--skip-chat-template", "--custom-output-len"]  # fmt: skip
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        args = parser.parse_args([
            "--backend", "openai", "--base-url", base_url.removesuffix("/v1"),
            "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer", str(tokenizer),
            *dataset, str(output_len), "--num-prompts", str(count),
            "--max-concurrency", str(users), "--num-warmups", "2", "--ignore-eos",
            "--temperature", "0", "--seed", str(seed), "--save-detailed", "--disable-tqdm",
        ])  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a report; the table has it
            result = vllm_bench_serve(args)
        return Point.of(seed, SavedResult.of(result))

    def measure(base_url: str, users: int, seed: int) -> Point:
        with tempfile.TemporaryDirectory(prefix="vllm-bench-") as folder:
            point = once(base_url, users, seed, Path(folder))
            if point.failed:
                again = next(seeds)
                causes = sorted({e.strip().splitlines()[-1] for e in point.errors})
                print(
                    f"{base_url} at {users} users, seed {seed}: {point.failed} requests failed "
                    f"({'; '.join(causes)}); run again with seed {again}"
                )
                point = once(base_url, users, again, Path(folder))
        return point

    return measure


# --8<-- [end:client]
