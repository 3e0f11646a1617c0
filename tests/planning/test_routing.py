"""The routers: who goes where, for loads and prompts chosen by hand."""

from __future__ import annotations

from collections import Counter

from llmserve_ref.planning.routing import (
    CacheAware,
    LeastLoaded,
    PrefixAffinity,
    RandomRouter,
    least_loaded,
)


def test_least_loaded_takes_the_first_of_the_idlest():
    assert least_loaded([2, 0, 0, 1]) == 1
    assert LeastLoaded().route([5, 4, 4], [1, 2, 3]) == 1


def test_random_is_seeded_and_spreads_evenly():
    picks = [RandomRouter(seed=3).route([0] * 4, None) for _ in range(5)]
    assert len(set(picks)) == 1  # a fresh router with the same seed picks the same replica
    router = RandomRouter(seed=3)
    counts = Counter(router.route([0] * 4, None) for _ in range(4000))
    assert set(counts) == {0, 1, 2, 3} and all(900 < c < 1100 for c in counts.values())


def test_prefix_affinity_sends_a_first_block_to_one_replica_whatever_the_loads():
    router = PrefixAffinity(block_size=4)
    shared = [9, 8, 7, 6]
    replicas = {
        router.route(loads, shared + tail)
        for loads in ([0, 9, 9], [9, 0, 9])
        for tail in ([1], [2, 3], [])
    }
    assert len(replicas) == 1
    firsts = Counter(router.route([0] * 8, [i, i, i, i, 0]) for i in range(800))
    assert len(firsts) == 8  # different first blocks spread over every replica
    assert router.route([3, 1, 2], [1, 2]) == 1  # shorter than a block: the least loaded


def test_cache_aware_follows_the_longest_match_and_balances_otherwise():
    router = CacheAware(cache_threshold=0.5, balance_abs_threshold=2, balance_rel_threshold=1.5)
    a, b = list(range(100)), list(range(1000, 1100))
    assert router.route([0, 0, 0], a) == 0
    assert router.route([1, 0, 0], b) == 1  # nothing matches: the least loaded
    assert router.route([1, 1, 0], [*a, 5]) == 0  # a's replica, though another is idler
    assert router.route([1, 1, 0], a[:40] + b) == 2  # 40% matched, under the threshold
    assert router.route([5, 1, 1], [*a, 6]) == 1  # out of balance: the idlest, despite the match
    assert router.trees[1].match([*a, 6]) == 101  # and that replica's tree now holds it
    assert router.route([0, 0, 0], None) == 0  # no token ids: the least loaded
