"""Tensor-parallel blocks equal the single-process block; the pipeline bubble matches GPipe's.

Each test starts real processes (gloo on 127.0.0.1) through `launch`, which gives up after
a timeout instead of hanging.
"""

from __future__ import annotations

import time

import pytest
import torch

from llmserve_ref.model.llama_config import ModelConfig
from llmserve_ref.model.parallel import (
    bubble_fraction,
    gpipe_bubble,
    launch,
    pipeline_worker,
    ring_allreduce_seconds,
    tp_allreduce_bytes_per_token,
    tp_worker,
)
from llmserve_ref.planning.hardware import gpu

CONFIG = ModelConfig(
    vocab_size=32,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=1,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=64,
)
BATCH, T = 2, 16


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
def test_tensor_parallel_block_equals_the_whole_block(world_size):
    results = launch(tp_worker, world_size, CONFIG, BATCH, T, timeout=60)
    for r in results:
        assert r["max_abs_error"] < 1e-5
        assert r["allreduce_calls"] == 2  # Megatron: one after attention, one after the MLP
        assert r["allreduce_bytes"] == BATCH * T * tp_allreduce_bytes_per_token(128, 1, 4)
        assert r["weight_fraction"] == pytest.approx(1 / world_size)


@pytest.mark.slow
def test_pipeline_bubble_matches_gpipe():
    stages, micro_batches = 4, 8
    results = launch(pipeline_worker, stages, micro_batches, 0.05, 32, timeout=60)
    # The schedule the messages allowed, in ticks: exactly GPipe's (wall-clock times vary).
    assert [r["ticks"] for r in results] == [
        [(stage + i, stage + i + 1) for i in range(micro_batches)] for stage in range(stages)
    ]
    schedule = bubble_fraction([r["ticks"] for r in results])
    assert schedule == pytest.approx(gpipe_bubble(stages, micro_batches), rel=1e-12)
    last = results[-1]
    assert len(last["outputs"]) == micro_batches
    for got, expected in zip(last["outputs"], last["expected"], strict=True):
        assert torch.allclose(got, expected)


def test_bubble_formula_and_measurement_by_hand():
    assert gpipe_bubble(4, 1) == pytest.approx(3 / 4)
    assert gpipe_bubble(4, 8) == pytest.approx(3 / 11)
    assert gpipe_bubble(1, 8) == 0
    # two stages, two micro-batches of 1 s each: stage 1 starts 1 s late, ends 1 s after stage 0
    busy = [[(0, 1), (1, 2)], [(1, 2), (2, 3)]]
    assert bubble_fraction(busy) == pytest.approx(gpipe_bubble(2, 2))


def test_allreduce_cost():
    # Llama-3.1-70B: 80 layers of width 8192, bf16
    per_token = tp_allreduce_bytes_per_token(8192, 80, 2)
    assert per_token == 2 * 80 * 8192 * 2
    nvlink = ring_allreduce_seconds(per_token, 8, gpu("H100-SXM").interconnect_bandwidth)
    pcie = ring_allreduce_seconds(per_token, 8, gpu("H100-PCIe").interconnect_bandwidth)
    assert nvlink == pytest.approx(2 * 7 / 8 * per_token / 450e9)
    assert pcie / nvlink == pytest.approx(900 / 128)


def test_tensor_parallel_refuses_uneven_splits():
    with pytest.raises(Exception, match="multiples of 3"):
        launch(tp_worker, 3, CONFIG, BATCH, T, timeout=60)


def _hang(rank: int, world_size: int) -> None:
    time.sleep(60)


def test_launch_times_out_instead_of_hanging():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish"):
        launch(_hang, 1, timeout=3)
    assert time.monotonic() - start < 30
