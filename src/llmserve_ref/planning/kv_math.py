"""KV cache size math: the bytes a model's keys and values take, and how many requests fit.

During decoding every layer keeps the keys and values of every earlier token, so
that a new token attends to them without recomputing them (the KV cache). Its
size is pure arithmetic on a model's `config.json`:

    bytes per token    = layers × (elements each layer caches per token) × bytes per element
    bytes per sequence = context length × bytes per token
    bytes per batch    = batch size × bytes per sequence

Standard attention caches one key and one value vector per KV head, so a layer
holds 2 × num_key_value_heads × head_dim elements per token. Multi-head attention
(MHA) has as many KV heads as query heads, grouped-query attention (GQA, Ainslie
et al. 2023) shares each KV head among a group of query heads, multi-query
attention (MQA, Shazeer 2019) keeps one. Multi-head latent attention (MLA,
DeepSeek-V2, 2024) caches instead one compressed latent of kv_lora_rank elements
plus one RoPE key of qk_rope_head_dim elements per layer, shared by all heads.

How many sequences fit is the memory left after the weights, divided by the
bytes of one sequence, the way vLLM sizes its cache: it takes the share
`gpu_memory_utilization` (vLLM's default, `llmserve_ref.planning.published.VLLM`) of each
GPU's memory, subtracts the
weights and (unlike this module) the activation peak it measures in a profiling
run, and gives the rest to the KV cache. Our counts are therefore upper bounds.

Memory is counted in bytes and printed in binary units (KiB, MiB, GiB), like the
GPU catalog in `llmserve_ref.planning.hardware`.

>>> from llmserve_ref.planning.model_catalog import model
>>> format_bytes(kv_bytes_per_token(model("Llama-3.1-8B").config, "bf16"))
'128 KiB'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmserve_ref.model.kv_cache import kv_elements
from llmserve_ref.planning.model_shape import ModelShape
from llmserve_ref.planning.published import VLLM

# --8<-- [start:dtypes]
# Bits per stored element. fp8 is e4m3 or e5m2; int4 packs two elements per byte.
DTYPE_BITS: dict[str, int] = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "int8": 8, "int4": 4}
# --8<-- [end:dtypes]


def dtype_bits(dtype: str) -> int:
    """Bits per element of a dtype named as in `DTYPE_BITS`.

    >>> dtype_bits("int4")
    4
    """
    try:
        return DTYPE_BITS[dtype]
    except KeyError:
        raise ValueError(
            f"unknown precision {dtype!r}; use one of {', '.join(DTYPE_BITS)}"
        ) from None


# --8<-- [start:kv_format]
@dataclass(frozen=True)
class KVFormat:
    """How the cache stores its elements: a dtype, and optionally per-group scales.

    A plain dtype counts element bits only. That is exact for fp32/fp16/bf16 and
    near enough for vLLM's fp8 cache, whose scales are one number per layer's K
    and V tensors. Integer KV quantization in the literature (KIVI, 2024; int4
    caches in LMDeploy and others) keeps a scale, often with a zero point, for
    every `group_size` elements: `scale_bytes` is what each group adds (4 = an
    fp16 scale and an fp16 zero point).

    >>> KVFormat("int4", group_size=32).bytes_for(256)  # 128 B of data + 8 groups × 4 B
    160
    """

    dtype: str = "bf16"
    group_size: int | None = None
    scale_bytes: int = 4

    def __post_init__(self) -> None:
        dtype_bits(self.dtype)
        if self.group_size is not None and self.group_size <= 0:
            raise ValueError(f"group_size must be positive, got {self.group_size}")
        if self.scale_bytes < 0:
            raise ValueError(f"scale_bytes must be zero or more, got {self.scale_bytes}")

    def bytes_for(self, elements: int) -> int:
        """Bytes that `elements` cached elements take, scales included."""
        bits = elements * dtype_bits(self.dtype)
        if bits % 8:
            raise ValueError(f"{elements} {self.dtype} elements do not fill whole bytes")
        scales = 0
        if self.group_size is not None:
            if elements % self.group_size:
                raise ValueError(
                    f"group_size {self.group_size} does not divide the {elements} elements "
                    "a layer caches per token; pick a divisor of the head dim"
                )
            scales = elements // self.group_size * self.scale_bytes
        return bits // 8 + scales


def as_kv_format(kv_dtype: str | KVFormat) -> KVFormat:
    """A `KVFormat` from a dtype name, or the format itself."""
    return kv_dtype if isinstance(kv_dtype, KVFormat) else KVFormat(kv_dtype)


# --8<-- [end:kv_format]


# --8<-- [start:bytes_per_token]
def kv_elements_per_layer(cfg: ModelShape, tensor_parallel: int = 1) -> int:
    """Elements one layer caches for one token, on each of `tensor_parallel` GPUs.

    Query heads never appear: GQA and MQA cache only their KV heads. Tensor
    parallelism splits the KV heads across GPUs; with more GPUs than KV heads each
    GPU keeps a copy of one. MLA's latent is not split by head, so every GPU keeps
    all of it (vLLM's behaviour).
    """
    cfg.check_tensor_parallel(tensor_parallel)
    if cfg.is_mla:
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim
    kv_heads_here = max(1, cfg.num_kv_heads // tensor_parallel)
    return kv_elements(kv_heads_here, cfg.head_dim)


def kv_bytes_per_token(
    cfg: ModelShape, kv_dtype: str | KVFormat = "bf16", *, tensor_parallel: int = 1
) -> int:
    """Bytes the cache grows by for one token of one sequence, on each GPU.

    >>> from llmserve_ref.planning.model_catalog import model
    >>> kv_bytes_per_token(model("Llama-3.1-8B").config, "bf16")  # 2 × 32 × 8 × 128 × 2
    131072
    """
    per_layer = as_kv_format(kv_dtype).bytes_for(kv_elements_per_layer(cfg, tensor_parallel))
    return cfg.num_layers * per_layer


# --8<-- [end:bytes_per_token]


# --8<-- [start:per_sequence]
def kv_bytes_per_sequence(
    cfg: ModelShape,
    context_len: int,
    kv_dtype: str | KVFormat = "bf16",
    *,
    tensor_parallel: int = 1,
) -> int:
    """Bytes of the cache of one sequence of `context_len` tokens (prompt plus output)."""
    cfg.check_context(context_len)
    return context_len * kv_bytes_per_token(cfg, kv_dtype, tensor_parallel=tensor_parallel)


def kv_bytes_per_batch(
    cfg: ModelShape,
    context_len: int,
    batch_size: int,
    kv_dtype: str | KVFormat = "bf16",
    *,
    tensor_parallel: int = 1,
) -> int:
    """Bytes of the cache of `batch_size` sequences of `context_len` tokens each."""
    if batch_size < 0:
        raise ValueError(f"batch size must be zero or more sequences, got {batch_size}")
    return batch_size * kv_bytes_per_sequence(
        cfg, context_len, kv_dtype, tensor_parallel=tensor_parallel
    )


# --8<-- [end:per_sequence]


# --8<-- [start:fit]
def weight_bytes(num_parameters: int, dtype: str = "bf16") -> int:
    """Bytes of the weights: parameters × bits / 8 (quantization scales not counted)."""
    if num_parameters < 0:
        raise ValueError(f"parameter count must be zero or more, got {num_parameters}")
    return -(-num_parameters * dtype_bits(dtype) // 8)  # rounded up to whole bytes


def kv_cache_budget(
    gpu_memory_bytes: int,
    weights_bytes: int,
    *,
    tensor_parallel: int = 1,
    gpu_memory_utilization: float = VLLM.gpu_memory_utilization,
) -> int:
    """Bytes each GPU has left for the KV cache: its usable share minus its slice of the weights.

    Negative when the weights alone do not fit. Activations, CUDA graphs and
    other buffers must also come out of `1 - gpu_memory_utilization`.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization is a fraction in (0, 1], got {gpu_memory_utilization}"
        )
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be 1 or more GPUs, got {tensor_parallel}")
    usable = math.floor(gpu_memory_bytes * gpu_memory_utilization)
    weights_here = -(-weights_bytes // tensor_parallel)  # each GPU's slice, rounded up
    return usable - weights_here


def max_kv_tokens(
    cfg: ModelShape,
    budget_bytes: int,
    kv_dtype: str | KVFormat = "bf16",
    *,
    tensor_parallel: int = 1,
) -> int:
    """Tokens the cache holds in `budget_bytes` per GPU: vLLM's "GPU KV cache size: N tokens"."""
    per_token = kv_bytes_per_token(cfg, kv_dtype, tensor_parallel=tensor_parallel)
    return max(0, budget_bytes) // per_token


def sequences_that_fit(
    cfg: ModelShape,
    context_len: int,
    budget_bytes: int,
    kv_dtype: str | KVFormat = "bf16",
    *,
    tensor_parallel: int = 1,
) -> int:
    """How many sequences of `context_len` tokens the cache holds at once."""
    cfg.check_context(context_len)
    if context_len == 0:
        raise ValueError("context length must be at least one token to count sequences")
    tokens = max_kv_tokens(cfg, budget_bytes, kv_dtype, tensor_parallel=tensor_parallel)
    return tokens // context_len


# --8<-- [end:fit]


UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit below it, two decimals unless exact.

    Rounds half up in integer arithmetic, so the page's calculator (JavaScript)
    prints the same text.

    >>> format_bytes(131072), format_bytes(70272), format_bytes(1023)
    ('128 KiB', '68.63 KiB', '1023 B')
    """
    if n < 0:
        raise ValueError(f"a byte count is zero or more, got {n}")
    k = 0
    while k + 1 < len(UNITS) and n >= 1024 ** (k + 1):
        k += 1
    unit = 1024**k
    if n % unit == 0:
        return f"{n // unit} {UNITS[k]}"
    hundredths = (200 * n + unit) // (2 * unit)
    return f"{hundredths // 100}.{hundredths % 100:02d} {UNITS[k]}"
