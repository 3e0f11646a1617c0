"""One step's batch: where each packed token sits, which slot it writes, who samples."""

from __future__ import annotations

import pytest
import torch

from llmserve_ref.engine import paged_batch
from llmserve_ref.engine.kv_storage import KVStorage
from llmserve_ref.engine.paged_batch import Chunk, PagedBatch
from llmserve_ref.kernels.flash_attention import sdpa_attention
from llmserve_ref.kernels.paged_attention import paged_attention, paged_decode_attention
from llmserve_ref.model.llama_config import ModelConfig

CONFIG = ModelConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2)


def storage(num_blocks: int = 8, block_size: int = 4) -> KVStorage:
    return KVStorage.for_model(CONFIG, num_blocks=num_blocks, block_size=block_size)


def test_positions_slots_and_logit_rows_of_a_mixed_batch():
    chunks = [
        Chunk([9], start=5, block_table=[3, 1], samples=True),  # decode at position 5
        Chunk([5, 6, 7], start=0, block_table=[2], samples=True),  # a whole 3-token prompt
        Chunk([1, 2], start=4, block_table=[0, 4], samples=False),  # a prompt chunk mid-way
    ]
    batch = PagedBatch(chunks, storage())
    assert batch.input_ids.tolist() == [[9, 5, 6, 7, 1, 2]]
    assert batch.positions(6).tolist() == [5, 0, 1, 2, 4, 5]
    # position p of a sequence sits in slot table[p // 4] * 4 + p % 4
    assert batch.slot_mapping.tolist() == [1 * 4 + 1, 8, 9, 10, 4 * 4 + 0, 4 * 4 + 1]
    assert batch.seq_lens.tolist() == [6, 3, 6]
    assert batch.logits_indices.tolist() == [0, 3]  # the chunk that does not sample has none


def test_a_chunk_with_guesses_needs_logits_at_each_guess_and_its_last_token():
    chunks = [
        Chunk([9], start=5, block_table=[3, 1], samples=True),
        Chunk([4, 7, 8], start=6, block_table=[0, 4, 5], samples=True, num_guesses=2),
        Chunk([5, 6], start=0, block_table=[2], samples=True),
    ]
    batch = PagedBatch(chunks, storage())
    assert batch.positions(6).tolist() == [5, 6, 7, 8, 0, 1]
    # the newest token's logits check guess 7, 7's check 8, and 8's draw the token after
    assert batch.logits_indices.tolist() == [0, 1, 2, 3, 5]


def test_attend_writes_keys_and_values_then_attends_causally_over_the_sequence():
    torch.manual_seed(0)
    kv = storage(num_blocks=4, block_size=2)
    heads, kv_heads, d = 4, 2, CONFIG.head_dim
    batch = PagedBatch([Chunk([1, 2, 3], start=0, block_table=[3, 0], samples=True)], kv)
    q, k, v = (
        torch.randn(1, heads, 3, d),
        torch.randn(1, kv_heads, 3, d),
        torch.randn(1, kv_heads, 3, d),
    )
    out = batch.attend(0, q, k, v, batch.positions(3))
    assert torch.equal(kv.keys(0)[3], k[0, :, :2].transpose(0, 1))  # positions 0, 1 in block 3
    assert torch.equal(kv.values(0)[0][0], v[0, :, 2])  # position 2 in block 0, slot 0
    expected, _ = sdpa_attention(q, k, v, causal=True)
    torch.testing.assert_close(out, expected.to(out.dtype), atol=1e-5, rtol=1e-5)


def test_decodes_guessing_sequences_and_prompts_each_attend_through_their_own_path():
    """One call per kind: the decode kernel, `paged_verify_attention` for every guessing
    sequence at once, the reference for prompt chunks; together, the reference's answer."""
    torch.manual_seed(0)
    kv = storage(num_blocks=16, block_size=4)
    kv.data.copy_(torch.randn_like(kv.data))  # earlier positions: whatever the cache holds
    chunks = [
        Chunk([9], start=5, block_table=[3, 1], samples=True),  # a decode at position 5
        Chunk([4, 7, 8], start=6, block_table=[0, 4, 5], samples=True, num_guesses=2),
        Chunk([2, 6], start=3, block_table=[6], samples=True, num_guesses=1),
        Chunk([5, 6, 7], start=0, block_table=[2], samples=True),  # a prompt
    ]
    calls = []

    def spy(name, kernel):
        def call(q, *args):
            calls.append((name, len(q)))
            return kernel(q, *args)

        return call

    with pytest.MonkeyPatch.context() as patch:
        for name in ("paged_verify_attention", "paged_attention"):
            patch.setattr(paged_batch, name, spy(name, getattr(paged_batch, name)))
        batch = PagedBatch(chunks, kv, spy("decode", paged_decode_attention))
        heads, kv_heads, d = 4, 2, CONFIG.head_dim
        q, k, v = (torch.randn(1, n, 9, d) for n in (heads, kv_heads, kv_heads))
        out = batch.attend(0, q, k, v, batch.positions(9))
    assert calls == [("decode", 1), ("paged_verify_attention", 5), ("paged_attention", 3)]
    expected = paged_attention(
        q[0].transpose(0, 1), kv.keys(0), kv.values(0), batch.block_tables, batch.seq_lens,
        batch.query_start,
    )  # fmt: skip
    torch.testing.assert_close(out[0].transpose(0, 1), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "chunks",
    [
        [Chunk([1, 2], 0, [0], True), Chunk([3], 2, [1], True)],  # a prompt before a decode
        [Chunk([1, 2], 0, [0], True), Chunk([3, 4], 2, [1], True, num_guesses=1)],
        [Chunk([3, 4], 2, [1], True, num_guesses=1), Chunk([3], 2, [2], True)],
    ],
)
def test_decodes_come_first_then_guessing_sequences_then_prompts(chunks):
    with pytest.raises(ValueError, match=r"decode chunk .* first, then the chunks with guesses"):
        PagedBatch(chunks, storage())
