"""``llmserve-ref bench``: its flags make the `BenchConfig` they say, and a run against the
fake server writes the table, the progress line and a JSON report that holds what ran.

The flag tests stop the run before anything is sent (a stand-in for `run` that raises
with what it was given), so they check the parsing alone. The run tests send a few short
requests to `llmserve_ref.bench.fake_server`; their only timing check is one-sided (a
measured TTFT is never below the injected one), which a loaded machine cannot break.
"""

from __future__ import annotations

import argparse
import json
import re

import pytest

from llmserve_ref.bench import bench_cli
from llmserve_ref.bench.bench_cli import cli, parse_lengths
from llmserve_ref.bench.bench_client import BenchConfig
from llmserve_ref.bench.fake_server import FakeConfig, serve_fake
from llmserve_ref.cli import main as llmserve_ref
from llmserve_ref.planning.workload import Fixed, LogNormal, Uniform

TTFT, ITL = 0.050, 0.020


@pytest.fixture(scope="module")
def fake_url():
    with serve_fake(FakeConfig(ttft=TTFT, itl=ITL)) as url:
        yield url


class Stopped(Exception):
    """Raised by the stand-in for `run`: what the command would have run, and how."""

    def __init__(self, config: BenchConfig, progress: bool) -> None:
        super().__init__(config)
        self.config, self.progress = config, progress


def parsed(monkeypatch, *argv: str) -> Stopped:
    """What ``llmserve-ref bench argv`` would run, stopped before it sends anything."""

    def stand_in(config: BenchConfig, progress: bool = False):
        raise Stopped(config, progress)

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


def test_no_flags_is_one_user_sending_100_requests_to_localhost(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stopped = parsed(monkeypatch)
    assert stopped.progress is True
    assert stopped.config == BenchConfig(
        base_url="http://127.0.0.1:8000",
        endpoint="completions",
        model="tiny",
        num_requests=100,
        concurrency=1,
        warmup=2,
        prompt_len=Fixed(32),
        output_len=Fixed(32),
        ignore_eos=True,
        seed=0,
        timeout=60.0,
    )


def test_every_flag_reaches_the_config(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    stopped = parsed(
        monkeypatch,
        *("--base-url", "http://10.0.0.1:9000/v1", "--endpoint", "chat", "--model", "m"),
        *("--request-rate", "5", "--burstiness", "0.5", "--max-concurrency", "4"),
        *("--num-requests", "7", "--duration", "2.5", "--warmup", "0"),
        *("--prompt-len", "uniform:8:16", "--output-len", "lognormal:50:0.3"),
        *("--no-ignore-eos", "--seed", "3", "--timeout", "5", "--no-progress"),
    )
    assert stopped.progress is False
    assert stopped.config == BenchConfig(
        base_url="http://10.0.0.1:9000/v1",
        endpoint="chat",
        model="m",
        num_requests=7,
        duration=2.5,
        concurrency=None,  # an open loop: the rate, not a number of users
        request_rate=5.0,
        burstiness=0.5,
        max_concurrency=4,
        warmup=0,
        prompt_len=Uniform(8, 16),
        output_len=LogNormal(50.0, 0.3),
        ignore_eos=False,
        seed=3,
        timeout=5.0,
        api_key="sk-test",
    )


def test_concurrency_makes_a_closed_loop(monkeypatch):
    config = parsed(monkeypatch, "--concurrency", "8").config
    assert (config.concurrency, config.request_rate) == (8, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "2", "--request-rate", "1"], "not allowed with argument"),
        (["--endpoint", "embeddings"], "invalid choice: 'embeddings'"),
        (["--prompt-len", "zipf:2"], "not a length distribution"),
        (["--origin", "received"], "invalid choice: 'received'"),
    ],
)
def test_bad_flags_are_refused_before_anything_runs(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(bench_cli, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exit_:
        cli(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def run_json(tmp_path, capsys, url: str, *flags: str) -> tuple[dict, str, str]:
    """Run the command with `flags` and --json; return the report, stdout and stderr."""
    report = tmp_path / "report.json"
    cli(["--base-url", url, "--json", str(report), *flags])
    captured = capsys.readouterr()
    return json.loads(report.read_text()), captured.out, captured.err


def test_the_json_report_holds_the_config_the_summary_and_every_request(
    fake_url, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    flags = ["--concurrency", "2", "--num-requests", "5", "--warmup", "1", "--output-len", "4"]
    document, out, _ = run_json(tmp_path, capsys, fake_url, *flags, "--no-progress")
    assert set(document) == {"config", "summary", "requests"}
    config = document["config"]
    assert "api_key" not in config and "sk-secret" not in json.dumps(document)
    assert (config["base_url"], config["concurrency"], config["num_requests"]) == (fake_url, 2, 5)
    assert (config["prompt_len"], config["output_len"]) == ("Fixed(length=32)", "Fixed(length=4)")
    summary = document["summary"]
    assert (summary["completed"], summary["failed"], summary["output_tokens"]) == (5, 0, 20)
    assert (summary["slo"], summary["goodput"]) == (None, None)
    assert summary["ttft"]["median"] >= TTFT - 0.001  # never early: the server waited that long
    requests = document["requests"]
    assert len(requests) == 5 and all(r["output_tokens"] == 4 for r in requests)
    assert f"{'successful requests':<32}{5:>12}" in out
    assert "goodput" not in out


def test_slo_flags_in_milliseconds_become_an_slo_in_seconds(fake_url, tmp_path, capsys):
    flags = ["--concurrency", "2", "--num-requests", "4", "--warmup", "0", "--output-len", "3"]
    slo = ["--slo-ttft-ms", "500", "--slo-tpot-ms", "40", "--origin", "scheduled"]
    document, out, _ = run_json(tmp_path, capsys, fake_url, *flags, *slo, "--no-progress")
    summary = document["summary"]
    assert summary["slo"] == {"ttft": 0.5, "tpot": 0.04, "e2e": None}
    assert summary["origin"] == "scheduled" and summary["goodput"] is not None
    assert "goodput (req/s in SLO)" in out and "latency (ms), from scheduled" in out


def test_a_target_of_zero_is_a_target_no_request_meets(fake_url, tmp_path, capsys):
    flags = ["--concurrency", "1", "--num-requests", "2", "--warmup", "0", "--output-len", "2"]
    document, _, _ = run_json(tmp_path, capsys, fake_url, *flags, "--slo-e2e-ms", "0")
    assert document["summary"]["slo"] == {"ttft": None, "tpot": None, "e2e": 0.0}
    assert document["summary"]["goodput"] == 0.0


def test_the_progress_line_counts_requests_and_ends_the_line(fake_url, tmp_path, capsys):
    flags = ["--concurrency", "2", "--num-requests", "4", "--warmup", "0", "--output-len", "2"]
    _, out, err = run_json(tmp_path, capsys, fake_url, *flags)
    assert err.count("\n") == 1  # one line, redrawn in place with carriage returns
    last = err.split("\r")[-1]
    assert re.fullmatch(r"bench \[#{20}\] 4/4 requests \d+\.\d s\n", last), last
    assert "bench" not in out  # the table alone on stdout
    _, _, quiet = run_json(tmp_path, capsys, fake_url, *flags, "--no-progress")
    assert "bench" not in quiet


def test_with_a_duration_the_progress_line_counts_without_a_total(fake_url, tmp_path, capsys):
    flags = ["--concurrency", "1", "--duration", "0.3", "--warmup", "0", "--output-len", "2"]
    document, _, err = run_json(tmp_path, capsys, fake_url, *flags)
    done = document["summary"]["completed"]
    assert done >= 1
    assert re.fullmatch(rf"bench {done} requests \d+\.\d s\n", err.split("\r")[-1])


def test_cli_writes_table_json_and_plot(fake_url, tmp_path, capsys):
    """`llmserve-ref bench ...`, with a trailing /v1 on the URL as OpenAI clients write it."""
    status = llmserve_ref(
        [
            "bench",
            "--base-url",
            f"{fake_url}/v1",
            "--concurrency",
            "2",
            "--num-requests",
            "4",
            "--warmup",
            "1",
            "--output-len",
            "4",
            "--slo-ttft-ms",
            "500",
            "--json",
            str(tmp_path / "out.json"),
            "--plot",
            str(tmp_path / "out.svg"),
        ]
    )
    captured = capsys.readouterr()
    assert status == 0
    assert "bench [####################] 4/4 requests" in captured.err
    table = captured.out
    assert "successful requests                        4" in table
    assert "goodput (req/s in SLO)" in table
    document = json.loads((tmp_path / "out.json").read_text())
    assert document["config"]["concurrency"] == 2
    assert document["summary"]["completed"] == 4
    assert len(document["requests"]) == 4
    assert (tmp_path / "out.svg").read_text().startswith("<?xml")
