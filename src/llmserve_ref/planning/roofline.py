"""The roofline: is a forward step limited by memory bandwidth or by arithmetic?

A step of a decoder computes some tokens (a prefill chunk, one token for each
sequence that decodes) and must move some bytes: every weight once, whatever the
batch, plus the KV cache its tokens attend to, plus the K and V it writes. Time
is bounded below by both

    compute time = FLOPs / peak FLOP/s        memory time = bytes / bandwidth

and the roofline model (Williams, Waterman and Patterson, 2009) predicts the
larger of the two. Their ratio is the *arithmetic intensity* FLOPs / bytes: below
the GPU's *ridge point* (peak FLOP/s ÷ bandwidth) a step is memory-bound, above
it compute-bound.

What is counted, per step of `num_tokens` computed tokens:

- FLOPs = 2 × linear parameters × num_tokens (a multiply and an add per weight
  per token) + 4 × layers × query heads × head_dim × attention pairs (q·k and
  p·v for every (query, key) pair scored).
- bytes = weights once + KV bytes per token × (tokens read + tokens written),
  the KV bytes per token from `kv_math.kv_bytes_per_token`.

Not counted: activations (small next to the weights at serving batch sizes),
quantization scales, kernel launch and scheduling overhead. Dense models only:
a mixture-of-experts step reads the experts its tokens route to, which depends on
the batch, so `StepCost` refuses them.

A real engine reaches only part of both peaks, so the roofline is a best case.
`Efficiency` scales them down: model FLOPs utilization (MFU) for compute-bound
steps, model bandwidth utilization (MBU) for memory-bound ones. `StepCost`
defaults to `ROOFLINE` (100% of the datasheet), which is what explains the
roofline itself; `VLLM_H100` holds what vLLM reached on an H100 in a published
benchmark, and capacity planning uses it unless told otherwise.

>>> from llmserve_ref.planning.hardware import gpu
>>> from llmserve_ref.planning.model_catalog import model
>>> cost = StepCost(model("Llama-3.1-8B"), gpu("H100-SXM"))
>>> f"{cost.step_time(num_tokens=1, kv_tokens_read=1000) * 1e3:.2f} ms"
'4.52 ms'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llmserve_ref.planning.hardware import GPU
from llmserve_ref.planning.kv_math import KVFormat, kv_bytes_per_token, weight_bytes
from llmserve_ref.planning.model_catalog import CatalogModel


# --8<-- [start:roof]
@dataclass(frozen=True)
class Roof:
    """The two ceilings of one device for one compute dtype: FLOP/s and bytes/s."""

    name: str
    peak_flops: float
    memory_bandwidth: float

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte where the two ceilings meet."""
        return self.peak_flops / self.memory_bandwidth

    def attainable_flops(self, intensity: float) -> float:
        """FLOP/s a kernel of `intensity` FLOPs/byte can reach: min(peak, intensity × bandwidth)."""
        return min(self.peak_flops, intensity * self.memory_bandwidth)


def datasheet_roof(gpu: GPU, dtype: str = "bf16") -> Roof:
    """A catalog GPU's roof from its datasheet, for matmuls in `dtype`."""
    if gpu.memory_bandwidth is None:
        raise ValueError(f"{gpu.name}: the catalog has no memory bandwidth for it")
    return Roof(f"{gpu.name} {dtype}", gpu.peak_flops(dtype), gpu.memory_bandwidth)


# --8<-- [end:roof]


# --8<-- [start:efficiency]
@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet peaks an engine reaches, end to end.

    `mfu` (model FLOPs utilization) scales the peak FLOP/s, which bounds
    compute-bound steps (prefill); `mbu` (model bandwidth utilization) scales the
    memory bandwidth, which bounds memory-bound steps (decode). Measured on a whole
    engine, both also absorb what the roofline leaves out: kernels below peak,
    launch gaps, scheduling, sampling.
    """

    mfu: float = 1.0
    mbu: float = 1.0

    def __post_init__(self) -> None:
        for name in ("mfu", "mbu"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} is a fraction in (0, 1], got {getattr(self, name)}")


ROOFLINE = Efficiency(mfu=1.0, mbu=1.0)

# vLLM 0.13.0 serving Llama-3.1-8B in bf16 on one H100 (no variant named; we take the
# SXM's datasheet), as published in PyTorch's torchao docs ("e2e model level
# benchmarks", NVIDIA H100, bfloat16 row, both figures prompt + output tokens/s,
# https://github.com/pytorch/ao/blob/36027d82d1ad9949597ea16002ff4940374b1b94/docs/source/workflows/inference.md):
#   `vllm bench throughput --num_prompts 32 --input_len 4096 --output_len 32`
#       -> 30946.5 total tokens/s (prefill-bound)
#   `vllm bench throughput --num_prompts 128 --input_len 32 --output_len 2048`
#       -> 6612 total tokens/s (decode-bound)
# The MFU and MBU at which the simulator, with vLLM's offline scheduler defaults,
# reproduces both: `llmserve_ref.planning.capacity.implied_efficiency` derives them
# (0.577 and 0.498) and tests/planning/test_capacity.py checks that they round to these.
VLLM_H100 = Efficiency(mfu=0.58, mbu=0.50)


# --8<-- [end:efficiency]


def linear_parameters(m: CatalogModel) -> int:
    """Parameters every token is multiplied through: all but an untied input embedding.

    An input embedding is a lookup, not a matmul: a step reads only its tokens' rows.
    When it is tied to the output head, the head reads all of it.
    """
    if m.config_json.get("n_routed_experts"):
        raise ValueError(
            f"{m.name} is a mixture of experts: the weights a step reads depend on which "
            "experts its tokens route to, which this dense-model cost does not model"
        )
    if m.config_json.get("tie_word_embeddings", False):
        return m.num_parameters
    return m.num_parameters - m.config_json["vocab_size"] * m.config_json["hidden_size"]


def prefill_attention_pairs(chunk: int, cached: int = 0) -> int:
    """(query, key) pairs a causal prefill chunk of `chunk` tokens after `cached` ones scores.

    >>> prefill_attention_pairs(4), prefill_attention_pairs(2, cached=10)
    (10, 23)
    """
    return chunk * cached + chunk * (chunk + 1) // 2


# --8<-- [start:step_cost]
class StepCost:
    """Predicted time of one forward step of `model` on `hardware`: max(compute, memory).

    `hardware` is a catalog `GPU` (its datasheet roof for the compute dtype) or a
    `Roof` (for example this machine's, measured by `llmserve_ref.planning.measure`). fp8
    weights compute in fp8 where the GPU has it; int8/int4 weights are weight-only
    quantization and compute in bf16. `efficiency` scales the FLOP/s by its MFU and
    the bandwidth by its MBU; the default, `ROOFLINE`, is the datasheet itself (the
    bound), and `VLLM_H100` is what a real engine measured (the forecast).

    Built once, `step_time` is a handful of multiply-adds, and it takes numpy
    arrays as well as ints, so a simulator can call it millions of times.
    """

    def __init__(
        self,
        model: CatalogModel,
        hardware: GPU | Roof,
        weight_dtype: str = "bf16",
        kv_dtype: str | KVFormat = "bf16",
        efficiency: Efficiency = ROOFLINE,
    ) -> None:
        if isinstance(hardware, GPU):
            hardware = datasheet_roof(hardware, "fp8" if weight_dtype == "fp8" else "bf16")
        cfg = model.config
        self.model, self.roof, self.efficiency = model, hardware, efficiency
        self.weight_bytes = weight_bytes(linear_parameters(model), weight_dtype)
        self.kv_bytes_per_token = kv_bytes_per_token(cfg, kv_dtype)
        self.flops_per_token = 2 * linear_parameters(model)
        self.flops_per_pair = 4 * cfg.num_layers * cfg.num_attention_heads * cfg.head_dim
        flops = hardware.peak_flops * efficiency.mfu
        bandwidth = hardware.memory_bandwidth * efficiency.mbu
        # Seconds per unit of each quantity, so a step is four multiply-adds and a max.
        self._s_per_token = self.flops_per_token / flops
        self._s_per_pair = self.flops_per_pair / flops
        self._s_weights = self.weight_bytes / bandwidth
        self._s_per_kv_token = self.kv_bytes_per_token / bandwidth

    def flops(self, num_tokens, attention_pairs):
        return self.flops_per_token * num_tokens + self.flops_per_pair * attention_pairs

    def bytes_moved(self, num_tokens, kv_tokens_read):
        """Weights once, the KV cache read, the new tokens' K and V written."""
        return self.weight_bytes + self.kv_bytes_per_token * (kv_tokens_read + num_tokens)

    def arithmetic_intensity(self, num_tokens, kv_tokens_read, attention_pairs=None):
        """FLOPs per byte moved (see `step_time` for the arguments)."""
        pairs = kv_tokens_read + num_tokens if attention_pairs is None else attention_pairs
        return self.flops(num_tokens, pairs) / self.bytes_moved(num_tokens, kv_tokens_read)

    def step_time(self, num_tokens, kv_tokens_read, attention_pairs=None):
        """Seconds for a step that computes `num_tokens` and reads `kv_tokens_read` cached tokens.

        `num_tokens` is prefill-chunk tokens plus decode tokens; `kv_tokens_read`
        sums, over the step's sequences, the cached tokens each attends to.
        `attention_pairs` defaults to `kv_tokens_read + num_tokens`, exact for
        decode (a new token attends to its cache and itself); pass
        `prefill_attention_pairs(...)` for prefill chunks.
        """
        pairs = kv_tokens_read + num_tokens if attention_pairs is None else attention_pairs
        compute = self.compute_time(num_tokens, pairs)
        memory = self.memory_time(num_tokens, kv_tokens_read)
        if isinstance(compute, np.ndarray) or isinstance(memory, np.ndarray):
            return np.maximum(compute, memory)
        return max(compute, memory)

    def compute_time(self, num_tokens, attention_pairs):
        """Seconds the step's FLOPs take at the peak FLOP/s times the MFU."""
        return self._s_per_token * num_tokens + self._s_per_pair * attention_pairs

    def memory_time(self, num_tokens, kv_tokens_read):
        """Seconds the step's bytes take at the bandwidth times the MBU."""
        return self._s_weights + self._s_per_kv_token * (kv_tokens_read + num_tokens)

    def decode_step_time(self, batch_size, context):
        """A decode step of `batch_size` sequences, each with `context` tokens cached."""
        return self.step_time(batch_size, batch_size * context)


# --8<-- [end:step_cost]
