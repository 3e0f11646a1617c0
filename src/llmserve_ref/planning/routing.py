"""Routing requests across replicas: where a request goes decides what its cache holds.

Each replica (one engine instance) keeps its own prefix cache, so a request finds its
prefix cached only on a replica that served the same prefix recently. A router that
ignores prefixes spreads each conversation, each system prompt, over every replica:
with N replicas, the next turn of a chat lands where the last one ran one time in N.
Routers that know this send requests by their prefix:

- `LeastLoaded`: the replica with the fewest unfinished requests (the simulator's
  default): balanced, blind to prefixes.
- `RandomRouter`: a uniformly random replica, as a plain load balancer does.
- `PrefixAffinity`: a hash of the prompt's first block picks the replica, so requests
  that start alike always meet; but all that share a first block (one system prompt)
  meet on one replica, however busy it is.
- `CacheAware`: SGLang's router policy, simplified. It keeps a radix tree of the prompts
  it sent to each replica (what that replica's cache probably holds), sends a request
  where the longest share of its prompt matches, and falls back to the least-loaded
  replica when no match reaches `cache_threshold` or when the loads drift too far apart.

A router sees the replicas' loads and the request's prompt token ids (None for requests
that carry none) and returns a replica's index.

>>> LeastLoaded().route([3, 1, 2], None)
1
>>> PrefixAffinity(block_size=2).route([0, 9, 9], [7, 8, 9])  # its hash names 1, busy or not
1
>>> router, sent = CacheAware(), (([0, 0], [1, 2, 3]), ([1, 0], [4, 5, 6]), ([1, 1], [1, 2, 3, 4]))
>>> [router.route(loads, prompt) for loads, prompt in sent]  # the third follows the first
[0, 1, 0]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from llmserve_ref.planning.published import SGLANG_ROUTER
from llmserve_ref.planning.radix_cache import RadixCache


class Router(Protocol):
    """Picks the replica for a request from their loads and the request's prompt."""

    def route(self, loads: Sequence[int], token_ids: Sequence[int] | None) -> int: ...


# --8<-- [start:routers]
def least_loaded(loads: Sequence[int]) -> int:
    """The replica with the fewest unfinished requests (the first of them on a tie)."""
    return min(range(len(loads)), key=loads.__getitem__)


@dataclass
class LeastLoaded:
    def route(self, loads: Sequence[int], token_ids: Sequence[int] | None) -> int:
        return least_loaded(loads)


@dataclass
class RandomRouter:
    seed: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def route(self, loads: Sequence[int], token_ids: Sequence[int] | None) -> int:
        return int(self.rng.integers(len(loads)))


@dataclass
class PrefixAffinity:
    """The replica a hash of the first `block_size` prompt tokens names (SHA-256, so that
    every router process, whatever its seed, sends a prefix to the same replica)."""

    block_size: int = 16

    def route(self, loads: Sequence[int], token_ids: Sequence[int] | None) -> int:
        if token_ids is None or len(token_ids) < self.block_size:
            return least_loaded(loads)
        first = b",".join(b"%d" % t for t in token_ids[: self.block_size])
        return int.from_bytes(hashlib.sha256(first).digest()[:8], "big") % len(loads)


@dataclass
class CacheAware:
    """The longest cached share of the prompt wins, unless the loads are out of balance.

    Loads are out of balance when the busiest replica has more than
    `balance_abs_threshold` requests beyond the idlest and more than
    `balance_rel_threshold` times as many; then the idlest takes the request. The
    defaults are SGLang's; when no match reaches the threshold SGLang picks the replica
    whose tree is smallest, this router the least loaded.
    """

    cache_threshold: float = SGLANG_ROUTER.cache_threshold
    balance_abs_threshold: int = SGLANG_ROUTER.balance_abs_threshold
    balance_rel_threshold: float = SGLANG_ROUTER.balance_rel_threshold
    trees: list[RadixCache] = field(default_factory=list)

    def route(self, loads: Sequence[int], token_ids: Sequence[int] | None) -> int:
        if not self.trees:
            self.trees = [RadixCache() for _ in loads]
        choice = least_loaded(loads)
        if token_ids is None:
            return choice
        busiest, idlest = max(loads), min(loads)
        balanced = (
            busiest - idlest <= self.balance_abs_threshold
            or busiest <= self.balance_rel_threshold * idlest
        )
        if balanced:
            matched = [tree.match(token_ids) for tree in self.trees]
            best = max(range(len(loads)), key=lambda i: (matched[i], -loads[i]))
            if matched[best] > self.cache_threshold * len(token_ids):
                choice = best
        self.trees[choice].insert(token_ids)
        return choice


# --8<-- [end:routers]
