"""The benchmark client, checked against the fake server's injected latencies.

The fake server waits TTFT = 50 ms before the first chunk and ITL = 20 ms between
chunks. On a shared two-core machine the client, the server and other people's
jobs compete for the CPU, so a measurement can only come out late, never early:

- TTFT median: at least the injected value (−1 ms), at most +25 ms at
  concurrency 1 and +75 ms at concurrency 8 (eight requests are parsed at once
  on a loaded CPU);
- TPOT and ITL medians: between −1 ms and +8 ms of the injected gap.

Errors of method are far larger than these: taking a chat stream's role chunk for
the first token gives a TTFT near 0, counting chunks instead of tokens doubles
TPOT at two tokens per chunk, and counting TTFT into TPOT (as guidellm's TPOT
does) gives 42 ms with the 200 ms TTFT of `test_tpot_excludes_the_first_token`.
"""

from __future__ import annotations

import pytest

from llmserve_ref.bench.bench_client import BenchConfig, request_specs, run
from llmserve_ref.bench.fake_server import FakeConfig, serve_fake
from llmserve_ref.planning.workload import Fixed

TTFT, ITL = 0.050, 0.020
TTFT_SLACK = {1: 0.025, 8: 0.075}
GAP_SLACK = 0.008


@pytest.fixture(scope="module")
def fake_url():
    with serve_fake(FakeConfig(ttft=TTFT, itl=ITL)) as url:
        yield url


@pytest.mark.parametrize("backend", ["openai", "openai-chat"])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_measures_the_injected_latencies(fake_url, backend, concurrency):
    config = BenchConfig(
        fake_url,
        backend=backend,
        max_concurrency=concurrency,
        num_prompts=2 * concurrency + 4,
        output_len=Fixed(8),
        num_warmups=concurrency,
    )
    result = run(config)
    s = result.summary()
    assert (s.completed, s.failed, s.short, s.without_usage) == (config.num_prompts, 0, 0, 0)
    assert s.total_output_tokens == 8 * config.num_prompts
    assert TTFT - 0.001 <= s.ttft.median <= TTFT + TTFT_SLACK[concurrency]
    assert ITL - 0.001 <= s.tpot.median <= ITL + GAP_SLACK
    assert ITL - 0.001 <= s.itl.median <= ITL + GAP_SLACK
    assert s.itl.count == 7 * config.num_prompts  # 8 chunks, 7 gaps, pooled
    for r in result.records:  # e2e = ttft + 7 gaps, exactly, by construction
        assert r.e2e() == pytest.approx(r.ttft() + 7 * r.tpot())


def test_tokens_come_from_usage_not_chunks():
    """Three tokens per chunk: 9 tokens in 3 chunks, 2 gaps of 60 ms after the first chunk.

    TPOT spreads those 120 ms over the 8 tokens after the first: 15 ms, although each
    chunk took 20 ms per token, because two tokens came with the first chunk.
    """
    with serve_fake(FakeConfig(ttft=TTFT, itl=3 * ITL, tokens_per_chunk=3)) as url:
        s = run(BenchConfig(url, max_concurrency=2, num_prompts=4, output_len=Fixed(9))).summary()
    assert s.total_output_tokens == 4 * 9
    assert s.itl.count == 4 * 2
    assert 3 * ITL - 0.001 <= s.itl.median <= 3 * ITL + GAP_SLACK
    tpot = 2 * 3 * ITL / 8
    assert tpot - 0.001 <= s.tpot.median <= tpot + 2 * GAP_SLACK / 8


def test_tpot_excludes_the_first_token():
    ttft = 0.200
    with serve_fake(FakeConfig(ttft=ttft, itl=ITL)) as url:
        s = run(
            BenchConfig(
                url, backend="openai-chat", max_concurrency=2, num_prompts=4, output_len=Fixed(8)
            )
        ).summary()
    assert ttft - 0.001 <= s.ttft.median <= ttft + TTFT_SLACK[1]
    assert ITL - 0.001 <= s.tpot.median <= ITL + GAP_SLACK  # (200 + 7 × 20) / 8 would be 42


def test_failures_are_recorded_and_the_run_goes_on():
    with serve_fake(FakeConfig(fail_every=3)) as url:
        result = run(BenchConfig(url, max_concurrency=2, num_prompts=9, output_len=Fixed(4)))
    s = result.summary()
    assert (s.completed, s.failed) == (6, 3)
    assert all(m.startswith("HTTP 500: ") and "injected failure" in m for m in s.errors)
    assert [r.index for r in result.records] == list(range(9))


def test_a_server_that_stops_early_is_reported():
    with serve_fake(FakeConfig(eos_after=3)) as url:
        stops = run(
            BenchConfig(
                url, max_concurrency=2, num_prompts=4, output_len=Fixed(8), ignore_eos=False
            )
        ).summary()
        ignores = run(BenchConfig(url, max_concurrency=2, num_prompts=4, output_len=Fixed(8)))
    assert (stops.short, stops.total_output_tokens) == (4, 12)
    assert (ignores.summary().short, ignores.summary().total_output_tokens) == (0, 32)
    assert ignores.config.ignore_eos  # the default, as vLLM's random dataset


def test_connection_errors_are_recorded():
    # A port nobody listens on: the first free port found, then released.
    with serve_fake(FakeConfig()) as url:
        pass
    s = run(BenchConfig(url, model="tiny", max_concurrency=1, num_prompts=2, timeout=2.0)).summary()
    assert (s.completed, s.failed) == (0, 2)
    assert all(m.startswith("ConnectError") for m in s.errors)


def test_open_loop_keeps_its_schedule(fake_url):
    config = BenchConfig(fake_url, request_rate=20.0, num_prompts=12, output_len=Fixed(4))
    result = run(config)
    due = [spec.arrival_time for spec in request_specs(config)]
    assert [r.scheduled for r in result.records] == due
    s = result.summary()
    assert s.completed == 12
    assert s.client_queue_time.median < 0.02  # sent within a few ms of the schedule
    assert result.duration >= due[-1] + TTFT


def test_request_specs_are_seeded_and_bounded():
    config = BenchConfig("http://x", request_rate=5.0, num_prompts=None, duration=3.0, seed=1)
    first, second = list(request_specs(config)), list(request_specs(config))
    assert first == second
    assert all(s.arrival_time <= 3.0 for s in first)
    assert 5 <= len(first) <= 30
    with pytest.raises(ValueError, match="infinite request rate sends everything at once"):
        BenchConfig("http://x", num_prompts=None, duration=3.0)  # no rate, no cap: no end


def test_closed_loop_duration_stops_sending(fake_url):
    config = BenchConfig(
        fake_url, max_concurrency=2, num_prompts=None, duration=0.5, output_len=Fixed(4)
    )
    result = run(config)
    assert 2 <= len(result.records) < 20
    assert all(r.sent <= 0.5 + 0.05 for r in result.records)


@pytest.mark.slow
def test_coordinated_omission():
    """A 1 s stall: the closed loop stops sending and hides it; the open loop does not."""
    cfg = FakeConfig(ttft=TTFT, itl=ITL, stall_every=20, stall_seconds=1.0)
    common = {"num_prompts": 32, "output_len": Fixed(4), "num_warmups": 2}
    results = {}
    for name, load in (
        ("closed", {"max_concurrency": 2}),
        ("open", {"request_rate": 8.0}),
        ("capped", {"request_rate": 8.0, "max_concurrency": 2}),
    ):
        with serve_fake(cfg) as url:
            results[name] = run(BenchConfig(url, **load, **common))

    def slow(name: str, origin: str = "sent") -> int:
        return sum(r.e2e(origin) > 0.5 for r in results[name].records)

    # Closed loop: only the two requests in flight during the stall see it.
    assert slow("closed") <= 3
    # Open loop: every request due during the stall waits for it (about 8 per second).
    assert slow("open") >= 5
    # Capped open loop: from the send time it looks like the closed loop;
    # from the scheduled time it shows the wait the cap hid.
    assert slow("capped") <= 3
    assert slow("capped", "scheduled") >= 5
    capped = results["capped"]
    late, on_time = capped.summary(origin="scheduled"), capped.summary()
    assert late.e2el.percentiles[90] > 2 * on_time.e2el.percentiles[90]


def test_without_a_rate_or_a_cap_every_request_is_sent_at_once(fake_url):
    """vLLM's default load: request rate inf, no max concurrency."""
    result = run(BenchConfig(fake_url, num_prompts=6, output_len=Fixed(2)))
    assert [r.scheduled for r in result.records] == [0.0] * 6
    assert max(r.sent for r in result.records) < TTFT  # all out before the first answer


def test_without_a_model_the_first_one_the_server_lists_is_benchmarked(fake_url):
    assert run(BenchConfig(fake_url, num_prompts=1, output_len=Fixed(1))).config.model == "fake"
    named = BenchConfig(fake_url, model="tiny", num_prompts=1, output_len=Fixed(1))
    assert run(named).config.model == "tiny"


def test_without_usage_the_prompt_counts_as_sent(fake_url):
    """vLLM counts the prompt it sent when the server reports no usage; so does this client
    (the output, by its chunks)."""
    no_usage = {"stream_options": {"include_usage": False}}
    config = BenchConfig(
        fake_url, input_len=Fixed(12), output_len=Fixed(3), num_prompts=2, extra_body=no_usage
    )
    s = run(config).summary()
    assert (s.without_usage, s.total_input_tokens, s.total_output_tokens) == (2, 24, 6)


@pytest.mark.parametrize(
    ("backend", "endpoint", "message"),
    [("openai", "/v1/embeddings", "must end with completions"),
     ("openai-chat", "/v1/completions", "must end with chat/completions")],
)  # fmt: skip
def test_an_endpoint_must_fit_its_backend_as_in_vllm(backend, endpoint, message):
    with pytest.raises(ValueError, match=message):
        BenchConfig("http://x", backend=backend, endpoint=endpoint)
