"""Requests on one prefix: blocks held and sequences that fit, against counts by hand."""

from __future__ import annotations

import pytest

from llmserve_ref.engine.kv_block import blocks_for
from llmserve_ref.planning.prefix_sharing import share_one_prompt, sharing_sequences_that_fit


@pytest.mark.parametrize(
    ("n", "prefix", "own", "size"),
    [(1, 100, 20, 16), (8, 1000, 50, 16), (5, 64, 64, 32), (12, 300, 7, 1)],
)
def test_the_shared_prefix_is_held_once(n, prefix, own, size):
    alone = share_one_prompt(n, prefix, own, size, caching=False)
    shared = share_one_prompt(n, prefix, own, size, caching=True)
    length = prefix + own + 1  # the first decode token has its slot
    full = prefix // size  # the prefix's full blocks: only these can be shared
    assert alone.blocks_used == n * blocks_for(length, size)
    assert shared.blocks_used == full + n * (blocks_for(length, size) - full)
    assert alone.prefill_tokens == n * (prefix + own)
    assert shared.prefill_tokens == n * (prefix + own - full * size)
    # Every sequence still attends to all of its tokens, the shared ones included.
    assert alone.kv_tokens_read == shared.kv_tokens_read == n * (prefix + own)


@pytest.mark.parametrize(
    ("blocks", "prefix", "own", "size"), [(1000, 2000, 300, 16), (50, 100, 30, 8), (10, 5, 5, 4)]
)
def test_sharing_sequences_that_fit(blocks, prefix, own, size):
    each = blocks_for(prefix + own, size)
    assert sharing_sequences_that_fit(blocks, prefix, own, size, caching=False) == blocks // each
    own_blocks = each - prefix // size
    expected = 1 + (blocks - each) // own_blocks if blocks >= each else 0
    assert sharing_sequences_that_fit(blocks, prefix, own, size, caching=True) == expected
