"""The serving engine's knobs, named and meaning what they mean in vLLM.

``llmserve-ref serve`` takes each as the flag of the same name (``--max-num-seqs``,
``--max-num-batched-tokens``, ``--block-size``, ``--[no-]enable-prefix-caching``,
``--max-model-len``, ``--kv-cache-memory-bytes``, ``--speculative-config``, ``--compile``),
and shows these defaults in its ``--help``. The batched engine turns them into its
scheduler's settings once it knows how many KV blocks its memory holds.

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
    compile: bool = False  # the forward compiled, as vLLM's (on unless --enforce-eager)

    @property
    def compile_sizes(self) -> list[int]:
        """The batch sizes the decode step is compiled for: none without `compile`, else
        1, 2, 4 and every multiple of 8 below `max_num_seqs`, and `max_num_seqs` itself (the
        shape of vLLM's CUDA graph capture sizes): a step is padded by 7 rows at most.

        >>> EngineConfig(max_num_seqs=40, compile=True).compile_sizes
        [1, 2, 4, 8, 16, 24, 32, 40]
        >>> EngineConfig(max_num_seqs=12, compile=True).compile_sizes
        [1, 2, 4, 8, 12]
        """
        n = self.max_num_seqs
        sizes = [s for s in (1, 2, 4, *range(8, n, 8)) if s < n]
        return [*sizes, n] if self.compile else []

    def scheduler_config(self, num_blocks: int) -> SchedulerConfig:
        return SchedulerConfig(
            token_budget=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
            num_blocks=num_blocks,
            enable_prefix_caching=self.enable_prefix_caching,
        )
