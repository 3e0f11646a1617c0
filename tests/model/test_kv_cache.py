"""The KV cache and the one forward path: cached, chunked and batched runs agree."""

import pytest
import torch

from llmserve_ref.device import get_device
from llmserve_ref.model.kv_cache import KVCache

DEVICE = get_device()
ATOL = 1e-5  # fp32; the cached and uncached paths sum in different orders


@pytest.fixture
def small_model(tiny_llama):
    """`small_model(num_kv_heads)`: 8 query heads sharing `num_kv_heads` K/V heads."""
    return lambda num_kv_heads=2: tiny_llama(
        num_attention_heads=8, num_key_value_heads=num_kv_heads, device=DEVICE
    )


def tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (batch, length), generator=g).to(DEVICE)


@torch.no_grad()
def test_decode_with_cache_equals_full_forward(small_model):
    model, ids = small_model(), tokens(1, 20)
    full = model(ids)
    cache = model.make_cache(1, 20)
    steps = [model(ids[:, :8], cache)]  # prefill 8 tokens, then decode 12 one by one
    steps += [model(ids[:, t : t + 1], cache) for t in range(8, 20)]
    assert cache.length == 20
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("chunks", [(20,), (5, 15), (7, 7, 6), (1,) * 20])
def test_prefill_in_chunks_equals_prefill_at_once(chunks, small_model):
    model, ids = small_model(), tokens(1, 20)
    full = model(ids)
    cache, outs, start = model.make_cache(1, 20), [], 0
    for n in chunks:
        outs.append(model(ids[:, start : start + n], cache))
        start += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=ATOL, rtol=0)


@torch.no_grad()
def test_batch_rows_match_single_sequences(small_model):
    model, ids = small_model(), tokens(3, 12)
    cache = model.make_cache(3, 13)
    batched = torch.cat([model(ids, cache), model(ids[:, :1], cache)], dim=1)
    for row in range(3):
        single = model(torch.cat([ids[row : row + 1], ids[row : row + 1, :1]], dim=1))
        torch.testing.assert_close(batched[row : row + 1], single, atol=ATOL, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
def test_any_number_of_kv_heads_runs_with_a_cache(num_kv_heads, small_model):
    model, ids = small_model(num_kv_heads), tokens(2, 10)
    cache = model.make_cache(2, 10)
    out = torch.cat([model(ids[:, :6], cache), model(ids[:, 6:], cache)], dim=1)
    assert cache.keys[0].shape == (2, num_kv_heads, 10, 8)
    torch.testing.assert_close(out, model(ids), atol=ATOL, rtol=0)


@torch.no_grad()
def test_truncate_rolls_back_to_an_earlier_state(small_model):
    model, ids = small_model(), tokens(1, 12)
    cache = model.make_cache(1, 12)
    model(ids[:, :8], cache)
    model(tokens(1, 4, seed=99), cache)  # four tokens we then reject
    cache.truncate(8)
    rolled_back = model(ids[:, 8:], cache)
    torch.testing.assert_close(rolled_back, model(ids)[:, 8:], atol=ATOL, rtol=0)


def test_cache_size_is_the_kv_formula(small_model):
    cache = small_model().make_cache(batch_size=3, max_len=40)
    # 2 (K and V) × layers × batch × kv_heads × max_len × head_dim × 4 bytes (fp32)
    assert cache.nbytes == 2 * 2 * 3 * 2 * 40 * 8 * 4


def test_cache_errors_are_explicit():
    cache = KVCache(num_layers=1, batch_size=1, num_kv_heads=1, max_len=4, head_dim=2)
    with pytest.raises(ValueError, match="KV cache overflow: 5 positions needed but max_len is 4"):
        cache.update(0, torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))
    with pytest.raises(ValueError, match="cannot truncate to 1: the cache holds 0 positions"):
        cache.truncate(1)
