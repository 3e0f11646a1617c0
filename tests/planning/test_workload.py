"""The workload generator: seeded, with the arrival rate, burstiness and lengths it is asked for."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest

from llmserve_ref.planning.workload import (
    Fixed,
    LogNormal,
    Uniform,
    arrival_times,
    conversations,
    sample_workload,
    with_system_prompts,
)


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


def test_system_prompts_are_shared_by_name_and_picked_by_popularity():
    base = sample_workload(2000, 10.0, Uniform(5, 50), Uniform(1, 20), seed=0)
    w = with_system_prompts(base, num_prompts=4, system_len=32, popularity=1.0, seed=1)
    assert w == with_system_prompts(base, num_prompts=4, system_len=32, popularity=1.0, seed=1)
    firsts = {}
    for spec, r in zip(base, w, strict=True):
        assert r.prompt_len == spec.prompt_len + 32 and r.output_len == spec.output_len
        assert len(r.token_ids) == r.prompt_len + r.output_len
        assert firsts.setdefault(r.prefix, r.token_ids[:32]) == r.token_ids[:32]
    assert sorted(firsts) == [f"system-{k}" for k in range(4)] and len(set(firsts.values())) == 4
    counts = Counter(r.prefix for r in w)
    shares = [counts[f"system-{k}"] / len(w) for k in range(4)]
    zipf = [1 / (k + 1) / sum(1 / (j + 1) for j in range(4)) for k in range(4)]
    assert shares == pytest.approx(zipf, abs=0.03)
    uniform = Counter(r.prefix for r in with_system_prompts(base, 4, 32, seed=1))
    assert all(abs(c / len(w) - 0.25) < 0.03 for c in uniform.values())
    # The requests' own tokens are their own: no two share a token after the system prompt.
    assert len({r.token_ids[32:48] for r in w}) == len(w)


def test_each_turn_resends_the_conversation_so_far():
    chats = conversations(
        30,
        turns=4,
        rate=2.0,
        system_len=16,
        question_len=Uniform(1, 9),
        answer_len=Uniform(1, 9),
        think_time=3.0,
        num_system_prompts=3,
        seed=4,
    )
    assert len(chats) == 120 and [r.arrival_time for r in chats] == sorted(
        r.arrival_time for r in chats
    )
    by_id = {r.request_id: r for r in chats}
    for c in range(30):
        turns = [by_id[f"{c}-{t}"] for t in range(4)]
        assert {r.prefix for r in turns} == {f"conversation-{c}"}
        for before, after in itertools.pairwise(turns):
            assert after.token_ids[: len(before.token_ids)] == before.token_ids
            assert after.arrival_time == pytest.approx(before.arrival_time + 3.0)
            assert after.prompt_len > len(before.token_ids)  # and a new question
        assert turns[0].token_ids[:16] == by_id[f"{c % 3}-0"].token_ids[:16]
    assert len({by_id[f"{c}-0"].token_ids[:16] for c in range(3)}) == 3
