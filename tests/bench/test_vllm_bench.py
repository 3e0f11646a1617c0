"""`vllm_client` hands vLLM's benchmark function the command's flags and reads its result.

vLLM is not installed in the tests session, so a stand-in of its three names
(``add_cli_args``, ``main``, ``FlexibleArgumentParser``) takes its place here: it records
the flags each run was given (and the prompts file, while it still exists) and answers with a
result in vLLM's format. That vLLM's own parser accepts the flags, and its client measures
what the pages print, is what `nox -s engines` runs (the running-a-serving-engine and
speculative-decoding pages).
"""

from __future__ import annotations

import itertools
import json
import sys
import types
from pathlib import Path

import pytest

from llmserve_ref.bench.vllm_bench import vllm_client

TOKENIZER = Path("tiny")


class StandIn:
    """vLLM's benchmark entry points, recording each run's flags and prompts."""

    def __init__(self, fail_first: int = 0) -> None:
        self.runs: list[list[str]] = []
        self.prompts: list[list[str]] = []
        self.fail_first = fail_first

    def main(self, argv: list[str]) -> dict:
        self.runs.append(argv)
        if "--dataset-path" in argv:
            path = Path(argv[argv.index("--dataset-path") + 1])
            self.prompts.append(
                [json.loads(line)["prompt"] for line in path.read_text().splitlines()]
            )
        count = int(argv[argv.index("--num-prompts") + 1])
        failed = self.fail_first if len(self.runs) == 1 else 0
        errors = ["Traceback ...\nReadTimeout: timed out"] * failed + [""] * (count - failed)
        return {
            "completed": count - failed, "failed": failed, "total_input_tokens": 32 * count,
            "total_output_tokens": 32 * (count - failed), "duration": 1.0,
            "request_throughput": count, "request_goodput": None,
            "output_throughput": 32.0 * (count - failed), "total_token_throughput": 64.0 * count,
            "median_ttft_ms": 5.0, "median_tpot_ms": 1.5,
            "output_lens": [32] * count, "errors": errors,
        }  # fmt: skip


@pytest.fixture
def vllm(monkeypatch) -> StandIn:
    stand_in = StandIn()
    serve = types.ModuleType("vllm.benchmarks.serve")
    serve.add_cli_args = lambda parser: None  # type: ignore[attr-defined]
    serve.main = lambda args: stand_in.main(args)  # type: ignore[attr-defined]
    argparse_utils = types.ModuleType("vllm.utils.argparse_utils")
    argparse_utils.FlexibleArgumentParser = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        parse_args=lambda argv: argv  # the flags themselves, as given
    )
    for name in ("vllm", "vllm.benchmarks", "vllm.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.benchmarks.serve", serve)
    monkeypatch.setitem(sys.modules, "vllm.utils.argparse_utils", argparse_utils)
    return stand_in


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_random_prompts_with_the_pages_flags(vllm):
    client = vllm_client(TOKENIZER, lambda users: 4 * users, seeds=itertools.count(100))
    point = client("http://127.0.0.1:8000/v1", 2, 7)
    (argv,) = vllm.runs
    assert flag(argv, "--base-url") == "http://127.0.0.1:8000"  # vLLM adds the endpoint
    assert flag(argv, "--endpoint") == "/v1/completions"
    assert (flag(argv, "--dataset-name"), flag(argv, "--input-len")) == ("random", "32")
    assert (flag(argv, "--output-len"), flag(argv, "--num-prompts")) == ("32", "8")
    assert (flag(argv, "--max-concurrency"), flag(argv, "--seed")) == ("2", "7")
    assert flag(argv, "--tokenizer") == "tiny"
    assert {"--ignore-eos", "--save-detailed"} <= set(argv)
    assert flag(argv, "--temperature") == "0"
    assert (point.seed, point.completed, point.failed) == (7, 8, 0)
    assert (point.output_lens, point.tpot_ms) == ((32,) * 8, 1.5)


def test_given_prompts_go_as_a_custom_dataset_sent_as_written(vllm):
    def prompts(count: int, seed: int) -> list[str]:
        return [f"prompt {seed}.{i} <|user|>" for i in range(count)]

    client = vllm_client(
        TOKENIZER, lambda users: 3, seeds=itertools.count(100), output_len=48, prompts=prompts
    )
    client("http://127.0.0.1:8000/v1", 1, 5)
    (argv,) = vllm.runs
    assert flag(argv, "--dataset-name") == "custom"
    assert flag(argv, "--custom-output-len") == "48"
    assert "--skip-chat-template" in argv and "--input-len" not in argv
    assert vllm.prompts == [["prompt 5.0 <|user|>", "prompt 5.1 <|user|>", "prompt 5.2 <|user|>"]]
    assert not Path(flag(argv, "--dataset-path")).exists()  # the file went with its run


def test_a_run_with_failures_is_printed_and_run_again_on_the_next_seed(vllm, capsys):
    vllm.fail_first = 2
    client = vllm_client(TOKENIZER, lambda users: 4, seeds=itertools.count(100))
    point = client("http://127.0.0.1:8000/v1", 1, 5)
    assert [flag(argv, "--seed") for argv in vllm.runs] == ["5", "100"]
    printed = capsys.readouterr().out
    assert "seed 5: 2 requests failed (ReadTimeout: timed out); run again with seed 100" in printed
    assert (point.seed, point.completed, point.failed) == (100, 4, 0)
