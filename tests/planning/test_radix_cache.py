"""The radix matcher against a brute-force oracle: the longest stored prefix, to the token."""

from __future__ import annotations

import numpy as np

from llmserve_ref.engine.block_manager import BlockManager
from llmserve_ref.planning.radix_cache import RadixCache


def common(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def random_sequences(rng, count: int) -> list[list[int]]:
    """Sequences sharing prefixes of every length: each extends a random cut of an earlier one."""
    seqs = [rng.integers(0, 5, size=rng.integers(1, 30)).tolist()]
    for _ in range(count - 1):
        base = seqs[rng.integers(len(seqs))]
        cut = int(rng.integers(0, len(base) + 1))
        seqs.append(base[:cut] + rng.integers(0, 5, size=rng.integers(0, 20)).tolist())
    return seqs


def test_match_is_the_longest_common_prefix_with_anything_stored():
    rng = np.random.default_rng(0)
    tree, stored = RadixCache(), []
    for seq in random_sequences(rng, 300):
        expected = max((common(seq, s) for s in stored), default=0)
        assert tree.match(seq) == expected
        assert tree.insert(seq) == len(seq) - expected  # only the tokens past the match are new
        stored.append(seq)
        assert tree.match(seq) == len(seq)


def test_each_shared_prefix_is_stored_once():
    rng = np.random.default_rng(1)
    tree = RadixCache()
    seqs = random_sequences(rng, 200)
    for seq in seqs:
        tree.insert(seq)
    # A token is stored once per distinct (prefix up to it): the nodes of a plain trie.
    trie_nodes = {tuple(seq[: i + 1]) for seq in seqs for i in range(len(seq))}
    assert tree.num_tokens == len(trie_nodes)
    assert tree.num_nodes <= tree.num_tokens


def test_a_lookup_visits_one_node_per_edge_not_one_per_token():
    tree = RadixCache()
    tree.insert(list(range(1000)))
    before = tree.nodes_visited
    assert tree.match(list(range(1000))) == 1000
    assert tree.nodes_visited - before == 1 and tree.tokens_compared == 1000
    tree.insert([*range(500), -1])  # splits the edge in two
    visited = tree.nodes_visited
    assert tree.match(list(range(1000))) == 1000 and tree.nodes_visited - visited == 2


def test_at_block_size_one_the_hashed_blocks_reuse_what_the_tree_does():
    rng = np.random.default_rng(2)
    tree = RadixCache()
    blocks = BlockManager(num_blocks=20_000, block_size=1)
    for i, seq in enumerate(random_sequences(rng, 100)):
        hits = len(blocks.cached_prefix(seq))
        assert hits == tree.match(seq)
        tree.insert(seq)
        blocks.allocate(str(i), len(seq), seq)
        blocks.cache_full_blocks(str(i), seq, num_computed_tokens=len(seq))
        blocks.free(str(i))
