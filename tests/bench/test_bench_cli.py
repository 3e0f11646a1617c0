"""``llmserve-ref bench``: its flags, vLLM's names with vLLM's meanings, make the `BenchConfig`
they say, and a run against the fake server writes the table, a progress bar on a terminal
only, and a result file in vLLM's format that holds what ran.

The flag tests stop the run before anything is sent (a stand-in for `run` that raises
with what it was given), so they check the parsing alone. The run tests send a few short
requests to `llmserve_ref.bench.fake_server`; their only timing check is one-sided (a
measured TTFT is never below the injected one), which a loaded machine cannot break.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys

import pytest

from llmserve_ref.bench import bench_cli
from llmserve_ref.bench.bench_cli import cli, parse_lengths
from llmserve_ref.bench.bench_client import BenchConfig
from llmserve_ref.bench.bench_result import read_result
from llmserve_ref.bench.fake_server import FakeConfig, serve_fake
from llmserve_ref.cli import main as llmserve_ref
from llmserve_ref.planning.workload import Fixed, LogNormal, Uniform

TTFT, ITL = 0.050, 0.020


@pytest.fixture(scope="module")
def fake_url():
    with serve_fake(FakeConfig(ttft=TTFT, itl=ITL)) as url:
        yield url


class Stopped(Exception):
    """Raised by the stand-in for `run`: what the command would have run, and whether it
    would have drawn a progress bar."""

    def __init__(self, config: BenchConfig, progress: bool) -> None:
        super().__init__(config)
        self.config, self.progress = config, progress


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def parsed(monkeypatch, *argv: str) -> Stopped:
    """What ``llmserve-ref bench argv`` would run, stopped before it sends anything."""

    def stand_in(config: BenchConfig, on_response=None):
        raise Stopped(config, on_response is not None)

    monkeypatch.setattr(bench_cli, "run", stand_in)
    with pytest.raises(Stopped) as stopped:
        cli(list(argv))
    return stopped.value


def test_parse_lengths_reads_the_three_forms():
    assert parse_lengths("32") == Fixed(32)
    assert parse_lengths("uniform:16:64") == Uniform(16, 64)
    assert parse_lengths("lognormal:100:0.5") == LogNormal(100.0, 0.5)
    with pytest.raises(argparse.ArgumentTypeError, match="not a length distribution: 'zipf:1'"):
        parse_lengths("zipf:1")


def test_no_flags_is_vllms_load_every_request_at_once_to_localhost(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stopped = parsed(monkeypatch)
    assert stopped.progress is False  # stderr is not a terminal here
    assert stopped.config == BenchConfig(
        base_url="http://127.0.0.1:8000",
        backend="openai",
        endpoint=None,
        model=None,  # the first model the server lists, as vLLM asks
        num_prompts=100,
        request_rate=math.inf,  # everything due at once, as in vLLM
        max_concurrency=None,
        num_warmups=0,
        input_len=Fixed(32),
        output_len=Fixed(32),
        ignore_eos=True,  # as vLLM's random dataset
        seed=0,
        timeout=60.0,
    )
    assert stopped.config.path == "/v1/completions"


def test_every_vllm_flag_reaches_the_config(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    stopped = parsed(
        monkeypatch,
        *("--backend", "openai-chat", "--host", "10.0.0.1", "--port", "9000"),
        *("--endpoint", "/v1/chat/completions", "--model", "m"),
        *("--request-rate", "5", "--burstiness", "0.5", "--max-concurrency", "4"),
        *("--num-prompts", "7", "--num-warmups", "3", "--input-len", "64", "--output-len", "16"),
        *("--no-ignore-eos", "--seed", "3", "--temperature", "0", "--top-p", "0.9"),
        *("--top-k", "5", "--min-p", "0.1", "--frequency-penalty", "0.5"),
        *("--presence-penalty", "0.25", "--repetition-penalty", "1.1"),
        *("--extra-body", '{"top_p": 0.5, "user": "bench"}', "--disable-tqdm"),
    )
    assert stopped.progress is False
    assert stopped.config == BenchConfig(
        base_url="http://10.0.0.1:9000",
        backend="openai-chat",
        endpoint="/v1/chat/completions",
        model="m",
        num_prompts=7,
        request_rate=5.0,
        burstiness=0.5,
        max_concurrency=4,
        num_warmups=3,
        input_len=Fixed(64),
        output_len=Fixed(16),
        ignore_eos=False,
        seed=3,
        api_key="sk-test",
        extra_body={  # the sampling flags given, then --extra-body over them, as vLLM merges
            "temperature": 0.0,
            "top_p": 0.5,
            "top_k": 5,
            "min_p": 0.1,
            "frequency_penalty": 0.5,
            "presence_penalty": 0.25,
            "repetition_penalty": 1.1,
            "user": "bench",
        },
    )


def test_our_own_flags_reach_the_config(monkeypatch):
    stopped = parsed(
        monkeypatch,
        *("--base-url", "http://10.0.0.1:9000/v1", "--request-rate", "2", "--duration", "2.5"),
        *("--input-len", "uniform:8:16", "--output-len", "lognormal:50:0.3", "--timeout", "5"),
    )
    config = stopped.config
    assert (config.base_url, config.duration, config.timeout) == ("http://10.0.0.1:9000/v1", 2.5, 5)
    assert (config.input_len, config.output_len) == (Uniform(8, 16), LogNormal(50.0, 0.3))


def test_max_concurrency_without_a_rate_is_a_closed_loop_of_that_many_users(monkeypatch):
    closed = parsed(monkeypatch, "--max-concurrency", "8").config
    assert (closed.request_rate, closed.max_concurrency, closed.users) == (math.inf, 8, 8)
    capped = parsed(monkeypatch, "--max-concurrency", "8", "--request-rate", "4").config
    assert (capped.request_rate, capped.max_concurrency, capped.users) == (4.0, 8, None)


def test_the_progress_bar_is_drawn_only_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert parsed(monkeypatch).progress is True
    assert parsed(monkeypatch, "--disable-tqdm").progress is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "openai-embeddings"], "invalid choice: 'openai-embeddings'"),
        (["--input-len", "zipf:2"], "not a length distribution"),
        (["--origin", "received"], "invalid choice: 'received'"),
        (["--goodput", "ttft=500"], "not KEY:VALUE (ms): 'ttft=500'"),
        (["--goodput", "itl:5"], "not ttft, tpot or e2el with a target >= 0: 'itl:5'"),
        (["--goodput", "tpot:-1"], "not ttft, tpot or e2el with a target >= 0"),
        (["--percentile-metrics", "ttft,latency"], "unknown metrics ['latency']"),
        (["--metric-percentiles", "50,101"], "percentiles lie between 0 and 100"),
        (["--num-requests", "5"], "unrecognized arguments: --num-requests"),  # ours, before
        (["--concurrency", "5"], "unrecognized arguments: --concurrency"),
    ],
)
def test_bad_flags_are_refused_before_anything_runs(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(bench_cli, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "openai-chat", "--endpoint", "/v1/completions"], "must end with chat/"),
        (["--max-concurrency", "0"], "max_concurrency must be greater than 0"),
        (["--request-rate", "0"], "request_rate must be positive"),
    ],
)
def test_configs_vllm_refuses_are_refused(monkeypatch, argv, message):
    monkeypatch.setattr(bench_cli, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(ValueError, match=message):
        cli(argv)


def run_saved(tmp_path, capsys, url: str, *flags: str) -> tuple[dict, str, str]:
    """Run the command with `flags`, saving the result detailed; the file, stdout, stderr."""
    cli(["--base-url", url, "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
         "--result-filename", "run.json", *flags])  # fmt: skip
    captured = capsys.readouterr()
    return json.loads((tmp_path / "run.json").read_text()), captured.out, captured.err


def test_the_result_file_has_vllms_flat_keys_in_ms_and_ours_beside(
    fake_url, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    flags = ["--max-concurrency", "2", "--num-prompts", "5", "--num-warmups", "1"]
    document, out, _ = run_saved(tmp_path, capsys, fake_url, *flags, "--output-len", "4")
    assert "sk-secret" not in json.dumps(document)
    assert (document["backend"], document["model_id"], document["num_prompts"]) == (
        "openai",
        "fake",  # asked of the server's /v1/models
        5,
    )
    assert (document["request_rate"], document["max_concurrency"]) == ("inf", 2)
    assert (document["completed"], document["failed"], document["total_output_tokens"]) == (
        5,
        0,
        20,
    )
    assert document["request_goodput"] is None and document["goodput"] is None
    for metric in ("ttft", "tpot", "itl", "itl_per_request", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            assert isinstance(document[f"{stat}_{metric}_ms"], float), (stat, metric)
    assert document["median_ttft_ms"] >= TTFT * 1e3 - 1  # in ms, and never early
    assert document["median_ttft_ms"] == pytest.approx(1e3 * sorted(document["ttfts"])[2])
    assert document["output_lens"] == [4] * 5 and document["errors"] == [""] * 5
    assert len(document["requests"]) == 5 and document["config"]["output_len"] == "Fixed(length=4)"
    assert f"{'successful requests':<32}{5:>12}" in out
    assert "goodput" not in out


def test_without_save_detailed_there_are_no_per_request_lists(fake_url, tmp_path, capsys):
    cli(["--base-url", fake_url, "--num-prompts", "2", "--output-len", "2", "--save-result",
         "--result-dir", str(tmp_path), "--label", "mine", "--max-concurrency", "1"])  # fmt: skip
    capsys.readouterr()
    (path,) = tmp_path.iterdir()
    assert re.fullmatch(r"mine-infqps-concurrency1-fake-\d{8}-\d{6}\.json", path.name)
    document = json.loads(path.read_text())
    assert not {"ttfts", "itls", "output_lens", "errors", "requests"} & set(document)
    assert read_result(path).completed == 2


def test_goodput_in_vllms_form_is_milliseconds(fake_url, tmp_path, capsys):
    flags = ["--max-concurrency", "2", "--num-prompts", "4", "--output-len", "3"]
    slo = ["--goodput", "ttft:500", "tpot:40", "--origin", "scheduled"]
    document, out, _ = run_saved(tmp_path, capsys, fake_url, *flags, *slo)
    assert document["goodput"] == {"ttft": 500.0, "tpot": 40.0}
    assert document["origin"] == "scheduled" and document["request_goodput"] is not None
    assert "request goodput (req/s)" in out and "latency (ms), from scheduled" in out


def test_a_target_of_zero_is_a_target_no_request_meets(fake_url, tmp_path, capsys):
    flags = ["--max-concurrency", "1", "--num-prompts", "2", "--output-len", "2"]
    document, _, _ = run_saved(tmp_path, capsys, fake_url, *flags, "--goodput", "e2el:0")
    assert document["goodput"] == {"e2el": 0.0}
    assert document["request_goodput"] == 0.0


def test_percentile_flags_choose_the_rows_columns_and_keys(fake_url, tmp_path, capsys):
    flags = ["--num-prompts", "3", "--output-len", "3", "--percentile-metrics", "ttft,e2el"]
    document, out, _ = run_saved(
        tmp_path, capsys, fake_url, *flags, "--metric-percentiles", "50,99.9"
    )
    latency = {k for k in document if k.endswith("_ms")}
    assert latency == {
        f"{stat}_{metric}_ms"
        for metric in ("ttft", "e2el")
        for stat in ("mean", "median", "std", "p50", "p99.9")
    }
    header = next(line for line in out.splitlines() if line.startswith("latency (ms)"))
    assert header.split()[-5:] == ["mean", "median", "std", "p50", "p99.9"]
    assert "TTFT" in out and "E2E latency" in out and "TPOT" not in out


def test_the_progress_bar_counts_requests_on_a_terminal(fake_url, monkeypatch, capsys):
    flags = ["--base-url", fake_url, "--max-concurrency", "2", "--num-prompts", "4"]
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    cli([*flags, "--output-len", "2"])
    err = terminal.getvalue()
    assert err.count("\n") == 1  # one line, redrawn in place with carriage returns
    last = err.split("\r")[-1]
    assert re.fullmatch(r"bench \[#{20}\] 4/4 requests \d+\.\d s\n", last), last
    assert "bench" not in capsys.readouterr().out  # the table alone on stdout
    quiet = Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    cli([*flags, "--output-len", "2", "--disable-tqdm"])
    assert quiet.getvalue() == ""


def test_no_carriage_returns_in_a_log(fake_url, capsys):
    cli(
        [
            "--base-url",
            fake_url,
            "--max-concurrency",
            "2",
            "--num-prompts",
            "4",
            "--output-len",
            "2",
        ]
    )
    captured = capsys.readouterr()
    assert captured.err == "" and "\r" not in captured.out


def test_with_a_duration_the_progress_bar_counts_without_a_total(fake_url, monkeypatch, tmp_path):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    flags = ["--max-concurrency", "1", "--duration", "0.3", "--output-len", "2"]
    cli(["--base-url", fake_url, *flags, "--save-result", "--result-dir", str(tmp_path),
         "--result-filename", "run.json"])  # fmt: skip
    done = read_result(tmp_path / "run.json").completed
    assert done >= 1
    assert re.fullmatch(rf"bench {done} requests \d+\.\d s\n", terminal.getvalue().split("\r")[-1])


def test_cli_writes_table_result_and_plot(fake_url, tmp_path, capsys):
    """`llmserve-ref bench ...`, with a trailing /v1 on the URL as OpenAI clients write it."""
    status = llmserve_ref(
        [
            "bench",
            *("--base-url", f"{fake_url}/v1", "--max-concurrency", "2", "--num-prompts", "4"),
            *("--num-warmups", "1", "--output-len", "4", "--goodput", "ttft:500"),
            *("--save-result", "--result-dir", str(tmp_path), "--result-filename", "out.json"),
            *("--plot", str(tmp_path / "out.svg")),
        ]
    )
    captured = capsys.readouterr()
    assert status == 0
    table = captured.out
    assert "successful requests                        4" in table
    assert "request goodput (req/s)" in table
    saved = read_result(tmp_path / "out.json")
    assert (saved.completed, saved.total_output_tokens) == (4, 16)
    assert (tmp_path / "out.svg").read_text().startswith("<?xml")
