"""The serving engine's knobs, named and meaning what they mean in vLLM.

``llmserve-ref serve`` takes each as the flag of the same name (``--max-num-seqs``,
``--max-num-batched-tokens``, ``--block-size``, ``--[no-]enable-prefix-caching``,
``--max-model-len``, ``--kv-cache-memory-bytes``, ``--speculative-config``), and shows
these defaults in its
``--help``. The batched engine turns them into its scheduler's settings once it knows
how many KV blocks its memory holds.

>>> EngineConfig().scheduler_config(num_blocks=2048).token_budget
2048
"""

from __future__ import annotations

from dataclasses import dataclass

from llmserve_ref.engine.scheduler_config import SchedulerConfig
from llmserve_ref.engine.speculative_config import SpeculativeConfig


@dataclass(frozen=True)
class EngineConfig:
    """The serving knobs, named and meaning what they mean in vLLM."""

    max_num_seqs: int = 256  # sequences running at once
    max_num_batched_tokens: int = 2048  # tokens in one forward pass (the token budget)
    block_size: int = 16  # tokens per KV block
    enable_prefix_caching: bool = True  # on by default, as in vLLM V1
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    kv_cache_memory_bytes: int = 64 * 2**20  # KV memory; vLLM's CPU backend: VLLM_CPU_KVCACHE_SPACE
    speculative_config: SpeculativeConfig | None = None  # None: no speculative decoding

    def scheduler_config(self, num_blocks: int) -> SchedulerConfig:
        return SchedulerConfig(
            token_budget=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
            num_blocks=num_blocks,
            enable_prefix_caching=self.enable_prefix_caching,
        )
