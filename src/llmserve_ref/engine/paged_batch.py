"""One step's batch on paged KV: the packed tokens, and attention through block tables.

Each step the scheduler picks, for each running sequence, some of its tokens: one
for a sequence that is decoding, its newest token and its guesses for one that
checks guesses (speculative decoding), a chunk of the prompt for one that is
prefilling. They are packed into one row, with no padding, decode tokens first,
then the guessing sequences:

    input_ids  [ d0 d1 d2 | g0 g0 g0 | p0 p0 p0 p0 | p1 p1 ]   d: decode, g: guesses, p: prompt
    positions  [ 17 40  9 | 21 22 23 |  0  1  2  3 | 12 13 ]   each token's own position

The model knows nothing of batches or blocks: it asks its cache
(`llmserve_ref.model.llama.KVStore`) where its tokens sit and to attend. `PagedBatch`
answers: it writes every layer's new keys and values to their slots in the
`KVStorage`, then attends each sequence's queries over its own keys, read through its
block table: decode tokens all at once (`paged_decode_attention`, or the Triton kernel
on CUDA), guessing sequences all at once too (`paged_verify_attention`), prompt chunks
one sequence at a time (`paged_attention`).

>>> from llmserve_ref.model.llama_config import ModelConfig
>>> storage = KVStorage.for_model(ModelConfig(hidden_size=32, num_attention_heads=4,
...                               num_key_value_heads=2), num_blocks=8, block_size=4)
>>> batch = PagedBatch([Chunk([9], start=5, block_table=[0, 1], samples=True),     # a decode
...                     Chunk([5, 6, 7], start=0, block_table=[2], samples=True)], storage)
>>> batch.positions(4).tolist(), batch.slot_mapping.tolist()
([5, 0, 1, 2], [5, 8, 9, 10])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from llmserve_ref.engine.kv_storage import KVStorage
from llmserve_ref.kernels.paged_attention import (
    paged_attention,
    paged_decode_attention,
    paged_verify_attention,
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One sequence's share of a step: its new tokens, where they start, where its KV lives."""

    token_ids: Sequence[int]
    start: int  # the position of token_ids[0] (the tokens already in the cache)
    block_table: Sequence[int]
    samples: bool  # the last token's logits pick the next token
    num_guesses: int = 0  # speculative decoding: the last tokens are guesses; each needs logits

    @property
    def is_decode(self) -> bool:
        return len(self.token_ids) == 1

    @property
    def kind(self) -> int:
        """The order a step packs chunks in: decodes (0), guessing sequences (1), prompts (2)."""
        return 0 if self.is_decode else 1 if self.num_guesses else 2


def _padded(tables: list[Sequence[int]], device: torch.device, width: int = 0) -> torch.Tensor:
    """Block tables of different lengths as one ``[batch, max_blocks]`` tensor (pad: block 0),
    at least `width` blocks wide."""
    width = max([width, *map(len, tables)])
    rows = [list(t) + [0] * (width - len(t)) for t in tables]
    return torch.tensor(rows, dtype=torch.long, device=device).view(len(tables), width)


# --8<-- [start:batch]
class PagedBatch:
    """One step's packed tokens, and what the model's attention needs to reach their KV.

    It is the `KVStore` the model runs with: `positions` says where each token sits,
    `attend` writes the new keys and values through the slot mapping and attends.
    """

    def __init__(
        self,
        chunks: Sequence[Chunk],
        storage: KVStorage,
        decode_kernel: Callable[..., torch.Tensor] | None = None,
        min_table_width: int = 0,
    ) -> None:
        """`min_table_width`: `block_tables` has at least this many columns (the blocks past
        a sequence's length are masked; a compiled step asks for 2, see compiled_decode)."""
        device, size = storage.data.device, storage.block_size
        self.storage = storage
        self.decode_kernel = decode_kernel or paged_decode_attention
        kinds = [c.kind for c in chunks]
        if kinds != sorted(kinds):
            raise ValueError(
                "put every decode chunk (one token) first, then the chunks with guesses, "
                "then the prompt chunks"
            )
        self.num_decodes = kinds.count(0)
        self.num_short = self.num_decodes + kinds.count(1)  # decodes and guessing sequences
        self.prompts_from = sum(len(c.token_ids) for c in chunks[: self.num_short])  # in the row
        self.input_ids = torch.tensor(
            [[t for c in chunks for t in c.token_ids]], dtype=torch.long, device=device
        )
        lengths = torch.tensor([len(c.token_ids) for c in chunks], device=device)
        starts = torch.tensor([c.start for c in chunks], device=device)
        # Token i of chunk b sits at starts[b] + i: a ramp per chunk, built without a loop.
        first = torch.cumsum(lengths, 0) - lengths  # where each chunk begins in the row
        chunk_of = torch.repeat_interleave(torch.arange(len(chunks), device=device), lengths)
        self._positions = starts[chunk_of] + torch.arange(len(chunk_of), device=device)
        self._positions -= first[chunk_of]
        tables = _padded([c.block_table for c in chunks], device, min_table_width)
        block_ids = tables[chunk_of, self._positions // size]
        self.slot_mapping = block_ids * size + self._positions % size
        self.seq_lens = starts + lengths  # keys each sequence has once this step writes
        self.block_tables = tables
        self.query_start = torch.cat((first, lengths.sum().view(1)))
        # The rows that need logits: each sampling chunk's last token, and before it one
        # row per guess (the logits at a guess's position check the guess after it).
        rows = [
            i
            for c, end in zip(
                chunks, itertools.accumulate(len(c.token_ids) for c in chunks), strict=True
            )
            if c.samples
            for i in range(end - 1 - c.num_guesses, end)
        ]
        self.logits_indices = torch.tensor(rows, dtype=torch.long, device=device)

    def positions(self, num_tokens: int) -> torch.Tensor:
        return self._positions

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """`q`, `k`, `v` are ``[1, heads, num_tokens, head_dim]``: the packed row, heads first."""
        q, k, v = (t[0].transpose(0, 1) for t in (q, k, v))  # [num_tokens, heads, head_dim]
        self.storage.write(layer, self.slot_mapping, k, v)
        k_cache, v_cache = self.storage.keys(layer), self.storage.values(layer)
        out = torch.empty_like(q)
        # Chunks [0, d) are decodes (tokens [0, d)), [d, s) guessing sequences (tokens
        # [d, p)), the rest prompt chunks (tokens [p, num_tokens)).
        d, s, p = self.num_decodes, self.num_short, self.prompts_from
        tables, lens, starts = self.block_tables, self.seq_lens, self.query_start
        if d:  # one query per sequence
            out[:d] = self.decode_kernel(q[:d], k_cache, v_cache, tables[:d], lens[:d])
        if s > d:  # each sequence's newest token and its guesses, all sequences at once
            out[d:p] = paged_verify_attention(
                q[d:p], k_cache, v_cache, tables[d:s], lens[d:s], starts[d : s + 1] - d
            )
        if s < len(lens):  # one sequence at a time
            out[p:] = paged_attention(q[p:], k_cache, v_cache, tables[s:], lens[s:], starts[s:] - p)
        return out.transpose(0, 1)[None]


# --8<-- [end:batch]
