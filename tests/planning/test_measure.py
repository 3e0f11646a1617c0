"""The measurement helpers: side-by-side timing, thread restore, a plausible roof, decode steps."""

from __future__ import annotations

import time

import pytest
import torch

from llmserve_ref.planning.measure import (
    decode_steppers,
    interleaved,
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
    # The ridge point is where the ceilings meet: below it a kernel is memory-bound
    # (its FLOP/s grow with intensity), at and above it compute-bound (flat at the peak).
    ridge = roof.ridge_point
    assert roof.attainable_flops(ridge) == pytest.approx(roof.peak_flops)
    assert roof.attainable_flops(ridge / 2) == pytest.approx(roof.peak_flops / 2)
    assert roof.attainable_flops(2 * ridge) == pytest.approx(roof.peak_flops)


def test_decode_steppers_repeat_one_decode_step_per_batch(tiny_llama):
    model = tiny_llama(vocab_size=32)
    steps = decode_steppers(model, [1, 3], context=5)
    logits = steps[3]()
    assert logits.shape == (3, 1, 32)
    torch.testing.assert_close(steps[3](), logits)  # the same step again, not a longer one
    assert steps[1]().shape == (1, 1, 32)
