"""The timed passes run what they say: a prefill, a decode step, a recomputation."""

import pytest
import torch

from llmserve_ref.planning.phases import decode_step, prefill_step, recompute_step


@pytest.fixture
def model(tiny_llama):
    """A small Llama of 16 positions, so that the limits are easy to reach."""
    return tiny_llama(vocab_size=32, max_position_embeddings=16)


@torch.no_grad()
def test_prefill_step_is_a_full_forward_and_repeats(model):
    m = model
    step = prefill_step(m, batch_size=3, prompt_len=5)
    expected = m(torch.zeros(3, 5, dtype=torch.long))
    for _ in range(3):  # the cache is emptied each call, so calls never overflow
        torch.testing.assert_close(step(), expected, atol=1e-5, rtol=0)


@torch.no_grad()
def test_decode_step_computes_one_token_per_sequence_at_a_fixed_context(model):
    m = model
    step = decode_step(m, batch_size=2, context=15)
    outs = [step() for _ in range(3)]
    assert outs[0].shape == (2, 1, 32)
    torch.testing.assert_close(outs[0], outs[2])


@torch.no_grad()
def test_recompute_step_feeds_context_plus_one_tokens(model):
    m = model
    out = recompute_step(m, context=9)()
    assert out.shape == (1, 10, 32)
    torch.testing.assert_close(out, m(torch.zeros(1, 10, dtype=torch.long)))


def test_errors_name_the_limit(model):
    m = model
    with pytest.raises(ValueError, match="17 positions needed but the model's max_position"):
        decode_step(m, 1, context=16)
    with pytest.raises(ValueError, match="17 positions needed"):
        recompute_step(m, context=16)
    with pytest.raises(ValueError, match="must be >= 1 and context >= 0, got 0, 4 and 0"):
        prefill_step(m, 0, 4)
