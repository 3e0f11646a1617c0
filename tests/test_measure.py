"""The measurement helpers: side-by-side timing, thread restore, a plausible roof, decode steps."""

from __future__ import annotations

import time

import torch

from llmserve_ref.model.llama import ModelConfig
from llmserve_ref.planning.measure import (
    decode_steppers,
    interleaved,
    random_llama,
    this_machine,
    torch_threads,
)


def test_interleaved_takes_medians_of_rounds_in_rotated_order():
    calls = []
    seconds = interleaved(
        {"a": lambda: calls.append("a"), "slow": lambda: (calls.append("s"), time.sleep(0.01))},
        rounds=3,
        device=torch.device("cpu"),
    )
    assert calls == ["a", "s", "a", "s", "s", "a", "a", "s"]  # warm-up, then rotated rounds
    assert seconds["slow"] >= 0.01 > seconds["a"]


def test_torch_threads_restores_the_count():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_this_machine_measures_a_plausible_roof():
    with torch_threads(1):
        roof = this_machine(rounds=3, device=torch.device("cpu"))
    assert 1e8 < roof.memory_bandwidth < 1e13  # between 0.1 GB/s and 10 TB/s
    assert 1e8 < roof.peak_flops < 1e16
    assert roof.ridge_point == roof.peak_flops / roof.memory_bandwidth


def test_decode_steppers_advance_their_own_caches():
    config = ModelConfig(
        vocab_size=32,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    model = random_llama(config, device=torch.device("cpu"))
    steps = decode_steppers(model, [1, 3], context=5, max_steps=2)
    logits = steps[3]()
    assert logits.shape == (3, 1, 32)
    steps[3]()
    assert steps[1]().shape == (1, 1, 32)
