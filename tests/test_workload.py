"""The workload generator: seeded, with the arrival rate, burstiness and lengths it is asked for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmserve_ref.planning.workload import Fixed, LogNormal, Uniform, arrival_times, sample_workload


def test_the_same_seed_gives_the_same_workload_and_another_seed_another():
    args = (50, 4.0, LogNormal(200, 1.0), Uniform(1, 100))
    assert sample_workload(*args, seed=3) == sample_workload(*args, seed=3)
    assert sample_workload(*args, seed=3) != sample_workload(*args, seed=4)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gaps_have_mean_one_over_rate_and_squared_cv_one_over_burstiness(burstiness):
    times = arrival_times(20_000, rate=5.0, burstiness=burstiness, rng=np.random.default_rng(0))
    gaps = np.diff(times, prepend=0.0)
    assert np.all(gaps >= 0) and np.all(np.diff(times) >= 0)
    assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.05)
    assert (gaps.var() / gaps.mean() ** 2) == pytest.approx(1 / burstiness, rel=0.1)


def test_an_infinite_rate_is_an_offline_batch():
    workload = sample_workload(5, math.inf, Fixed(10), Fixed(3))
    assert [r.arrival_time for r in workload] == [0.0] * 5


def test_lengths_stay_in_their_ranges():
    rng = np.random.default_rng(0)
    assert set(Fixed(7).sample(rng, 10)) == {7}
    uniform = Uniform(3, 5).sample(rng, 1000)
    assert set(uniform) == {3, 4, 5}
    tail = LogNormal(100, 1.0, low=10, high=2000).sample(rng, 50_000)
    assert tail.min() == 10 and tail.max() == 2000
    assert np.median(tail) == pytest.approx(100, rel=0.05)
    assert tail.mean() == pytest.approx(100 * math.exp(0.5), rel=0.05)  # the clip barely moves it
    assert 0.005 < np.mean(tail > 1000) < 0.02  # one in a hundred beyond ten times the median


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="rate and burstiness must be positive"):
        sample_workload(3, 0.0, Fixed(1), Fixed(1))
    with pytest.raises(ValueError, match="at least one token"):
        sample_workload(3, 1.0, Fixed(0), Fixed(1))
