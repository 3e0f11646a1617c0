"""`forward_step`: every call runs the same pass, of the shapes asked, and nothing else.

The oracle is a store written here that keeps no state: it attends each layer's new
queries over `context` zero keys and values followed by the new ones, with SDPA and a mask
from absolute positions. A call of the step must give exactly what one forward pass
through that store gives, call after call. A spy on the model's attention counts the keys
each call attends over, and one on `make_cache` that the cache is allocated once, up front.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from llmserve_ref.model import kv_cache
from llmserve_ref.model.forward_step import forward_step

ATOL = 1e-5  # fp32; SDPA and grouped_attention sum in different orders


class ZeroContext:
    """A `KVStore` with `context` positions of zero keys and values before the new tokens."""

    def __init__(self, context: int) -> None:
        self.context = context

    def positions(self, num_tokens: int) -> torch.Tensor:
        return torch.arange(self.context, self.context + num_tokens)

    def attend(self, layer, q, k, v, positions):
        batch, kv_heads, _, head_dim = k.shape
        zeros = torch.zeros(batch, kv_heads, self.context, head_dim)
        keys, values = torch.cat([zeros, k], dim=2), torch.cat([zeros, v], dim=2)
        mask = torch.arange(keys.shape[2]) <= positions[:, None]
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


@pytest.fixture
def model(tiny_llama):
    return tiny_llama(vocab_size=32, max_position_embeddings=16)


@pytest.mark.parametrize(("batch_size", "context", "width"), [(1, 0, 5), (2, 5, 1), (3, 7, 4)])
def test_each_call_is_one_pass_after_context_zeros(model, batch_size, context, width):
    step = forward_step(model, batch_size, context, width)
    with torch.no_grad():
        expected = model(torch.zeros(batch_size, width, dtype=torch.long), ZeroContext(context))
    for _ in range(4):  # again and again: the cache is rolled back, never grown
        out = step()
        assert out.shape == (batch_size, width, 32)
        torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)


def test_a_step_that_fills_the_model_runs_forever(model):
    step = forward_step(model, batch_size=1, context=12, width=4)  # all 16 positions
    first = step()
    for _ in range(10):
        assert torch.equal(step(), first)


def test_without_a_cache_every_token_is_fed_again(model):
    step = forward_step(model, batch_size=2, context=6, width=3, use_cache=False)
    out = step()
    assert out.shape == (2, 9, 32)  # all context + width positions, computed again
    assert torch.equal(out, model(torch.zeros(2, 9, dtype=torch.long)).detach())
    assert torch.equal(step(), out)


@pytest.mark.parametrize("use_cache", [True, False])
def test_attention_sees_context_plus_width_keys_in_every_layer(model, monkeypatch, use_cache):
    seen = []
    real = kv_cache.grouped_attention

    def spy(q, k, v, positions):
        seen.append((q.shape[2], k.shape[2], positions.tolist()))
        return real(q, k, v, positions)

    monkeypatch.setattr(kv_cache, "grouped_attention", spy)
    monkeypatch.setattr("llmserve_ref.model.llama.grouped_attention", spy)
    step = forward_step(model, batch_size=2, context=5, width=3, use_cache=use_cache)
    step()
    step()
    queries = 3 if use_cache else 8  # with a cache only the new tokens are fed
    expected = (queries, 8, list(range(8 - queries, 8)))
    assert seen == [expected] * (2 * model.config.num_hidden_layers)


def test_the_cache_is_allocated_once_up_front(model, monkeypatch):
    made = []
    real = model.make_cache
    monkeypatch.setattr(model, "make_cache", lambda *a: made.append(a) or real(*a))
    step = forward_step(model, batch_size=2, context=5, width=3)
    assert made == [(2, 8)]  # batch_size, context + width
    step()
    step()
    assert made == [(2, 8)]
    forward_step(model, batch_size=2, context=5, width=3, use_cache=False)()
    assert made == [(2, 8)]  # no cache without use_cache


def test_a_step_runs_in_inference_mode(model):
    out = forward_step(model, 1, context=2, width=2)()
    assert out.is_inference() and not out.requires_grad


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 4, 1), "must be >= 1 and context >= 0, got 0, 1 and 4"),
        ((1, 4, 0), "got 1, 0 and 4"),
        ((1, -1, 1), "got 1, 1 and -1"),
        ((1, 16, 1), "17 positions needed but the model's max_position_embeddings is 16"),
        ((1, 0, 17), "17 positions needed"),
    ],
)
def test_errors_say_what_is_wrong(model, args, message):
    batch_size, context, width = args
    with pytest.raises(ValueError, match=message):
        forward_step(model, batch_size, context, width)
