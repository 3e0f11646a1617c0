"""The model runner: one packed pass gives each sequence the logits it gets alone."""

from __future__ import annotations

import torch

from llmserve_ref.engine.model_runner import ModelRunner
from llmserve_ref.engine.paged_batch import Chunk


def test_a_packed_step_gives_each_sequence_its_own_logits(tiny_llama):
    model = tiny_llama()
    runner = ModelRunner(model, num_blocks=16, block_size=4)
    a, b = [3, 1, 4, 1, 5, 9], [2, 7, 1]
    with torch.inference_mode():
        alone = [model(torch.tensor([p]))[0, -1] for p in (a, b)]
        runner.forward([Chunk(a[:5], 0, [0, 1], samples=False)])  # a's prompt, all but one
        logits = runner.forward(
            [Chunk(a[5:], 5, [0, 1], samples=True), Chunk(b, 0, [2], samples=True)]
        )
    assert logits.dtype == torch.float32 and logits.shape == (2, model.config.vocab_size)
    torch.testing.assert_close(logits[0], alone[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[1], alone[1], atol=1e-4, rtol=1e-4)


def test_a_sequence_checking_guesses_gets_the_logits_of_each_position(tiny_llama):
    model = tiny_llama()
    runner = ModelRunner(model, num_blocks=16, block_size=4)
    a, b = [3, 1, 4, 1, 5, 9, 2], [2, 7, 1]
    with torch.inference_mode():
        alone = [model(torch.tensor([p]))[0] for p in (a, b)]
        runner.forward([Chunk(a[:4], 0, [0, 1], False), Chunk(b[:2], 0, [2], False)])
        logits = runner.forward(  # b's decode, a's newest token and two guesses
            [Chunk(b[2:], 2, [2], True), Chunk(a[4:], 4, [0, 1], True, num_guesses=2)]
        )
    assert logits.shape == (4, model.config.vocab_size)
    torch.testing.assert_close(logits[0], alone[1][2], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[1:], alone[0][4:], atol=1e-4, rtol=1e-4)


def test_chunks_in_any_order_get_their_rows_in_that_order(tiny_llama):
    """The runner packs decodes, then guessing sequences, then prompts (`PagedBatch`'s
    order); the logits come back in the order the chunks were given."""
    model = tiny_llama()
    prompt = Chunk([3, 1, 4, 1], 0, [0], samples=True)
    guessing = Chunk([2, 7, 1], 5, [1, 2], samples=True, num_guesses=2)
    decode = Chunk([5], 2, [3], samples=True)
    logits = {}
    for name, chunks in {"packed": [decode, guessing, prompt],
                         "given": [prompt, decode, guessing]}.items():  # fmt: skip
        runner = ModelRunner(model, num_blocks=8, block_size=4)  # the same fresh cache
        logits[name] = runner.forward(chunks)
    packed, given = logits["packed"], logits["given"]  # rows: decode 1, guessing 3, prompt 1
    torch.testing.assert_close(given, torch.cat([packed[4:], packed[:1], packed[1:4]]))


def test_copy_on_write_copies_are_made_before_the_step(tiny_llama):
    runner = ModelRunner(tiny_llama(), num_blocks=4, block_size=4)
    runner.forward([Chunk([1, 2, 3], 0, [0], samples=True)])
    before = runner.storage.keys(0)[0].clone()
    runner.forward([Chunk([4], 3, [1], samples=True)], blocks_to_copy=[(0, 1)])
    assert torch.equal(runner.storage.keys(0)[1][:3], before[:3])  # copied, then written at 3
