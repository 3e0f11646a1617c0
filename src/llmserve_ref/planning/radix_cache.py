"""A token-granular prefix matcher: a radix tree over token ids, as SGLang keeps its cache.

The block manager (`llmserve_ref.engine.block_manager`) finds a cached prefix in whole
blocks: it hashes each full block of the prompt, chained to the block before, and looks
the hashes up, so a prefix is reused up to the last block boundary it fills and the
tokens after it are computed again. SGLang's RadixAttention (Zheng et al.,
arXiv:2312.07104) keeps its cache in a radix tree instead: every edge is a run of token
ids, children are found by their first token, and a lookup walks down while the prompt
matches, so a prefix is reused to the token.

This tree holds token ids only, no KV cache (counting what each scheme would reuse is
all the pages ask of it), and never evicts. `match` also counts what a lookup costs:
the nodes it visits and the tokens it compares.

>>> tree = RadixCache()
>>> tree.insert([1, 2, 3, 4, 5])
5
>>> tree.insert([1, 2, 3, 9])  # splits the edge after 1, 2, 3
1
>>> tree.match([1, 2, 3, 9, 9]), tree.match([1, 2, 7]), tree.match([8])
(4, 2, 0)
>>> tree.num_tokens, tree.num_nodes  # tokens stored once, and nodes besides the root
(6, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


# --8<-- [start:radix]
@dataclass(eq=False)
class _Node:
    """An edge's tokens (the run from its parent) and the children, by their first token."""

    tokens: tuple[int, ...] = ()
    children: dict = field(default_factory=dict)  # {first token: _Node}


class RadixCache:
    """Token sequences stored once per shared prefix; `match` finds the longest one."""

    def __init__(self) -> None:
        self.root = _Node()
        self.num_tokens = 0  # tokens on all edges: each shared prefix counted once
        self.num_nodes = 0
        self.nodes_visited = 0  # the cost of the lookups so far
        self.tokens_compared = 0

    def _walk(self, tokens: Sequence[int]) -> tuple[_Node, int, int]:
        """The deepest node the tokens reach, how many tokens matched, and how far into
        that node's edge (its whole length unless the tokens part ways inside it)."""
        node, matched, into = self.root, 0, 0
        while matched < len(tokens):
            child = node.children.get(tokens[matched])
            if child is None:
                break
            self.nodes_visited += 1
            edge = child.tokens
            run = tokens[matched : matched + len(edge)]
            into = len(edge) if tuple(run) == edge else _common(edge, run)
            self.tokens_compared += into
            node, matched = child, matched + into
            if into < len(edge):
                break
        return node, matched, into

    def match(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of `tokens` are stored: the prefix a cache could reuse."""
        return self._walk(tokens)[1]

    def insert(self, tokens: Sequence[int]) -> int:
        """Store `tokens`; return how many were new (those past the longest stored prefix)."""
        node, matched, into = self._walk(tokens)
        if into < len(node.tokens):  # the tokens leave inside node's edge: split it there
            head, tail = node.tokens[:into], node.tokens[into:]
            lower = _Node(tail, node.children)
            node.tokens, node.children = head, {tail[0]: lower}
            self.num_nodes += 1
        if matched < len(tokens):
            rest = tuple(tokens[matched:])
            node.children[rest[0]] = _Node(rest)
            self.num_nodes += 1
            self.num_tokens += len(rest)
        return len(tokens) - matched


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common prefix of `a` and `b`."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --8<-- [end:radix]
