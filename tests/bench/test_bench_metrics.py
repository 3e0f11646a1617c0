"""Benchmark metric math on hand-made timelines: TTFT, TPOT, ITL, percentiles, goodput."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmserve_ref.bench.bench_metrics import (
    RequestRecord,
    Stats,
    format_table,
    plot_cdfs,
    summarize,
)
from llmserve_ref.planning.slo import SLO


def record(
    index: int,
    sent: float,
    chunks: list[float],
    tokens: int | None = None,
    scheduled: float | None = None,
    max_tokens: int | None = None,
    prompt: int = 10,
) -> RequestRecord:
    n = len(chunks) if tokens is None else tokens
    return RequestRecord(
        index,
        sent if scheduled is None else scheduled,
        sent,
        list(chunks),
        output_tokens=n,
        prompt_tokens=prompt,
        max_tokens=n if max_tokens is None else max_tokens,
    )


def test_ttft_e2e_tpot_of_one_request():
    r = record(0, sent=1.0, chunks=[1.2, 1.25, 1.30, 1.40])
    assert r.ttft() == pytest.approx(0.2)
    assert r.e2e() == pytest.approx(0.4)
    assert r.tpot() == pytest.approx(0.2 / 3)  # the first token is excluded
    assert r.itl() == pytest.approx([0.05, 0.05, 0.10])


def test_tpot_counts_tokens_not_chunks():
    """Two chunks of 5 tokens each: 10 tokens, 9 gaps between tokens after the first."""
    r = record(0, sent=0.0, chunks=[0.1, 0.19], tokens=10)
    assert r.tpot() == pytest.approx(0.09 / 9)
    assert r.itl() == pytest.approx([0.09])  # one gap per chunk


def test_one_token_has_no_tpot_but_passes_a_tpot_slo():
    r = record(0, sent=0.0, chunks=[0.1])
    assert math.isnan(r.tpot())
    assert r.itl() == []
    assert r.meets(SLO(ttft=0.2, tpot=0.001))
    assert not r.meets(SLO(ttft=0.05))


def test_an_slo_judges_e2e_from_the_origin_and_fails_a_failed_request():
    r = record(0, sent=0.3, scheduled=0.0, chunks=[0.4, 0.5])  # e2e 0.2 from sent, 0.5 due
    assert r.meets(SLO(e2e=0.25)) and not r.meets(SLO(e2e=0.25), origin="scheduled")
    failed = record(1, sent=0.0, chunks=[0.1])
    failed.error = "HTTP 500"
    assert not failed.meets(SLO())


def test_origin_scheduled_adds_the_client_side_wait():
    r = record(0, sent=2.0, scheduled=0.5, chunks=[2.1, 2.2])
    assert r.ttft() == pytest.approx(0.1)
    assert r.ttft("scheduled") == pytest.approx(1.6)
    assert r.e2e("scheduled") == pytest.approx(1.7)
    assert r.tpot() == pytest.approx(0.1)  # independent of the origin


def test_stats_percentiles_interpolate_like_numpy():
    values = [float(v) for v in range(1, 101)]
    s = Stats.of(values)
    assert (s.count, s.mean, s.median) == (100, 50.5, 50.5)
    assert list(s.percentiles) == [90, 95, 99]
    assert s.percentiles[90] == pytest.approx(90.1)
    assert s.percentiles[99] == pytest.approx(99.01)
    assert Stats.of(values, percentiles=(25, 99.9)).percentiles[99.9] == pytest.approx(99.901)
    assert Stats.of([math.nan, 3.0]).count == 1
    empty = Stats.of([])
    assert math.isnan(empty.mean) and math.isnan(empty.std) and math.isnan(empty.percentiles[99])


def test_std_is_numpys_of_the_values_as_vllms():
    """vLLM reports np.std: the deviation of the values (ddof 0), not of a sample."""
    assert Stats.of([1.0, 3.0]).std == 1.0
    assert Stats.of([2.0]).std == 0.0


@given(st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=50))
def test_stats_are_ordered(values):
    s = Stats.of(values)
    p90, p95, p99 = s.percentiles.values()
    assert min(values) <= s.median <= p90 <= p95 <= p99 <= max(values)
    assert s.median == pytest.approx(float(np.median(values)))
    assert s.std == pytest.approx(float(np.std(values)))


def test_pooled_itl_weights_long_requests_more_than_per_request_mean():
    """vLLM pools every gap; a per-request mean gives each request one vote."""
    fast = record(0, 0.0, [0.1 + 0.01 * i for i in range(11)])  # 10 gaps of 10 ms
    slow = record(1, 0.0, [0.1, 0.2])  # 1 gap of 100 ms
    s = summarize([fast, slow], duration=1.0)
    assert s.itl.mean == pytest.approx((10 * 0.01 + 0.1) / 11)
    assert s.itl_per_request.mean == pytest.approx((0.01 + 0.1) / 2)
    assert s.tpot.mean == pytest.approx((0.01 + 0.1) / 2)


def test_summary_counts_throughput_errors_and_goodput():
    good = record(0, 0.0, [0.05, 0.07, 0.09], prompt=20)
    slow_first = record(1, 0.0, [0.50, 0.52, 0.54], prompt=20)
    short = record(2, 0.0, [0.05, 0.07], max_tokens=8, prompt=20)
    failed = RequestRecord(3, 0.0, 0.0, error="HTTP 500: boom")
    empty = RequestRecord(4, 0.0, 0.0)
    s = summarize(
        [good, slow_first, short, failed, empty], duration=2.0, slo=SLO(ttft=0.1, tpot=0.05)
    )
    assert (s.completed, s.failed, s.short) == (3, 2, 1)
    assert s.errors == {"HTTP 500: boom": 1, "no content in the response": 1}
    assert (s.total_input_tokens, s.total_output_tokens) == (60, 8)
    assert s.request_throughput == pytest.approx(1.5)
    assert s.output_throughput == pytest.approx(4.0)
    assert s.total_token_throughput == pytest.approx(34.0)
    # good and short meet the SLO; slow_first does not
    assert s.request_goodput == pytest.approx(1.0)
    table = format_table(s)
    assert "error x1: HTTP 500: boom" in table
    assert "1 requests stopped before max_tokens" in table
    assert "request goodput" in table


def test_the_table_shows_the_metrics_and_percentiles_asked_for():
    records = [record(i, 0.0, [0.1 + 0.01 * i, 0.12 + 0.01 * i]) for i in range(4)]
    s = summarize(records, duration=1.0, percentiles=(50, 99.9))
    lines = format_table(s, metrics=("ttft", "client_queue_time")).splitlines()
    assert lines[-3].split()[-5:] == ["mean", "median", "std", "p50", "p99.9"]
    assert lines[-2].startswith("TTFT") and lines[-1].startswith("client queue time")
    ttft = [float(v) for v in lines[-2].split()[1:]]
    assert ttft == pytest.approx([115.0, 115.0, 11.2, 115.0, 130.0], abs=0.05)


def test_plot_has_four_cdfs():
    records = [record(i, 0.0, [0.05 + 0.001 * i, 0.07 + 0.001 * i]) for i in range(10)]
    fig = plot_cdfs(records)
    assert [ax.get_title() for ax in fig.axes] == [
        "TTFT (10 values)",
        "TPOT (10 values)",
        "ITL (every gap) (10 values)",
        "E2E latency (10 values)",
    ]
