"""What other systems and papers state, each with where it says so: one home per fact.

A page that quotes a vLLM default or a paper's figure reads it from here, written into its
prose at build time (``{{ llmserve_ref.planning.published.VLLM.gpu_memory_utilization }}``,
see hooks/package_values.py) or imported by a block, so the fact is typed once, next to its
source and the version it was read from. The engines session checks the vLLM defaults
against the vLLM it installs (tests/engines/test_published_vs_vllm.py).

>>> VLLM.version, VLLM.gpu_memory_utilization
('0.32.0', 0.92)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VLLMDefaults:
    """vLLM's defaults that the pages and the package use, as of `version`."""

    version: str = "0.32.0"
    # vllm/config/cache.py, CacheConfig.gpu_memory_utilization: the share of a GPU's memory
    # (on the CPU backend, of its NUMA node's) the engine may use for weights, activations
    # and the KV cache.
    gpu_memory_utilization: float = 0.92


VLLM = VLLMDefaults()


@dataclass(frozen=True)
class VLLMOfflineBatchDefaults:
    """The scheduler limits vLLM picks for offline runs on a large GPU, in `versions`.

    Offline is the `LLM` class, which `vllm bench throughput` drives (usage context
    `LLM_CLASS`); a large GPU has at least `min_gpu_memory_gib` GiB and is not an A100.
    vLLM's OpenAI-compatible server gets a smaller token budget on the same GPU.
    """

    # vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: the branch for
    # `device_memory >= 70 * GiB_bytes and "a100" not in device_name`, its
    # UsageContext.LLM_CLASS entries. Read in the sdists of vLLM 0.13.0 (the version that
    # ran the torchao benchmarks, see `roofline.VLLM_H100` and `TORCHAO_H100`) and of
    # 0.32.0, which agree (0.32.0 adds a branch for 160 GiB and more, with the same
    # offline values).
    versions: tuple[str, ...] = ("0.13.0", "0.32.0")
    min_gpu_memory_gib: int = 70
    max_num_batched_tokens: int = 16384
    max_num_seqs: int = 1024


VLLM_OFFLINE = VLLMOfflineBatchDefaults()


@dataclass(frozen=True)
class TorchaoH100Llama8B:
    """Published throughputs of Llama-3.1-8B on one H100 that the package is not fitted to.

    The bf16 row of the same table is what `roofline.VLLM_H100` is fitted to (the
    comment above it gives those figures); these check the fit on runs it never saw.
    """

    # PyTorch's torchao docs, docs/source/workflows/inference.md, "e2e model level
    # benchmarks", NVIDIA H100, float8_rowwise row (fp8 weights and activations, KV cache
    # in bf16), vLLM 0.13.0, prompt + output tokens/s of
    # `vllm bench throughput --num_prompts 32 --input_len 4096 --output_len 32` (prefill-
    # bound) and `--num_prompts 128 --input_len 32 --output_len 2048` (decode-bound),
    # https://github.com/pytorch/ao/blob/36027d82d1ad9949597ea16002ff4940374b1b94/docs/source/workflows/inference.md
    fp8_prefill_bound_tokens_per_s: float = 45312.5
    fp8_decode_bound_tokens_per_s: float = 8025.95
    # torchao's README of October 2024, torchao/quantization/README.md, "Benchmarks",
    # "CUDA backend | NVIDIA-H100 GPU", Llama-3.1-8B "Base (bfloat16)": tokens/s decoding
    # one sequence with torchao's own compiled generator (torchao/_models/llama/generate.py),
    # not vLLM,
    # https://github.com/pytorch/ao/blob/92dd5f557d32ce616a138dfe0bdc195355271514/torchao/quantization/README.md#benchmarks
    bf16_batch1_decode_tokens_per_s: float = 126.90


TORCHAO_H100 = TorchaoH100Llama8B()


@dataclass(frozen=True)
class GQAPaper:
    """Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from
    Multi-Head Checkpoints", EMNLP 2023, https://arxiv.org/abs/2305.13245."""

    # The abstract ("uptraining existing multi-head language model checkpoints into models
    # with MQA using 5% of original pre-training compute") and Section 2.1, where the share
    # is alpha, the proportion of the original pre-training steps a converted checkpoint is
    # uptrained for.
    uptraining_share: float = 0.05


GQA_PAPER = GQAPaper()
