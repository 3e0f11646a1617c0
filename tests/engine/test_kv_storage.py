"""The KV storage: blocks of every layer's keys and values, written through slots."""

from __future__ import annotations

import pytest
import torch

from llmserve_ref.engine.kv_storage import KVStorage, num_blocks_for
from llmserve_ref.model.llama_config import ModelConfig

CONFIG = ModelConfig(
    num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2
)


def test_blocks_that_fit_follow_the_kv_size_math():
    per_token = 2 * CONFIG.num_hidden_layers * CONFIG.num_key_value_heads * CONFIG.head_dim * 4
    assert CONFIG.kv_bytes_per_token(torch.float32) == per_token
    assert num_blocks_for(10 * 16 * per_token + 1, CONFIG, block_size=16) == 10
    assert num_blocks_for(16 * per_token, CONFIG, 16, torch.float16) == 2
    with pytest.raises(ValueError, match="hold no block"):
        num_blocks_for(per_token, CONFIG, block_size=16)


def test_write_puts_each_token_in_its_slot_and_copy_blocks_copies_every_layer():
    kv = KVStorage.for_model(CONFIG, num_blocks=4, block_size=2)
    assert kv.nbytes == kv.num_blocks * 2 * CONFIG.kv_bytes_per_token(torch.float32)
    k = torch.arange(3 * 2 * 16, dtype=torch.float32).view(3, 2, 16)
    kv.write(1, torch.tensor([5, 0, 1]), k, -k)
    assert torch.equal(kv.keys(1)[2][1], k[0]) and torch.equal(kv.values(1)[2][1], -k[0])
    assert torch.equal(kv.keys(1)[0], k[1:]) and not kv.keys(0).any()
    kv.copy_blocks([(0, 3)])
    assert torch.equal(kv.keys(1)[3], kv.keys(1)[0]) and torch.equal(kv.values(1)[3], -k[1:])
