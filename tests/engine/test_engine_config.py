"""The engine's knobs: vLLM's names and defaults, and the scheduler settings they become."""

from __future__ import annotations

import dataclasses

from llmserve_ref.engine.engine_config import EngineConfig


def test_defaults_and_what_the_scheduler_gets():
    config = EngineConfig(max_num_seqs=8, max_num_batched_tokens=64, block_size=4)
    scheduler = config.scheduler_config(num_blocks=100)
    assert (scheduler.token_budget, scheduler.max_num_seqs, scheduler.block_size) == (64, 8, 4)
    assert scheduler.num_blocks == 100 and scheduler.enable_prefix_caching
    off = dataclasses.replace(config, enable_prefix_caching=False).scheduler_config(100)
    assert not off.enable_prefix_caching
    default = EngineConfig()
    assert default.enable_prefix_caching and default.max_model_len is None
    assert default.kv_cache_memory_bytes == 64 * 2**20
